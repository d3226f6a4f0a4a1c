"""A run's trace in a real Arize Phoenix (pinned in scripts/phoenix.py), read back from its own API.

Phoenix (from PyPI, in its own virtual environment in the machine's cache) runs on free loopback
ports; the service (the real app, its install actor on the session's Ray) exports to Phoenix's
OTLP/HTTP receiver. A two-agent team runs: the lead delegates, the worker makes an allowed and a
denied outbound request. Then Phoenix's REST API must give back one trace with the span tree of
docs/observability.md ("Traces") and the right parents, token counts equal to the run record's,
the verdicts and the billed amount as attributes, and no prompt text.

When Phoenix cannot be installed or started here the test fails under CI and is skipped elsewhere,
with one line saying why.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from config.tracing import TraceSettings
from scripts.phoenix import Phoenix, PhoenixUnavailable
from tests.support import waiting
from tests.support.runtime import managed_client, start_target
from tests.test_tracing_export import paid_team_install, script_team

TASK = "Draft the launch announcement for the winter release"
# Phoenix keeps what earlier runs sent (its database is in the cache): this run's own trace id.
CALLER_TRACE = uuid.uuid4().hex
CALLER_SPAN = uuid.uuid4().hex[:16]


@pytest.fixture(scope="module")
def phoenix() -> Iterator[Phoenix]:
    """A running Phoenix; stopped (and its data removed) after the module."""
    server = Phoenix()
    try:
        server.start()
    except PhoenixUnavailable as exc:
        server.stop()
        reason = f"live Phoenix test cannot run: {exc}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    yield server
    server.stop()


def flat(attributes: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Phoenix's attributes (nested by their dotted names) as dotted keys again."""
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat(value, f"{name}."))
        else:
            out[name] = value
    return out


async def test_a_runs_trace_in_phoenix(make_client, aiohttp_server, store, phoenix):
    project = await asyncio.to_thread(phoenix.default_project_id)
    settings = TraceSettings(
        endpoint=phoenix.otlp_endpoint + "/v1/traces",
        viewer_url=f"{phoenix.base_url}/projects/{project}/traces/{{traceId}}",
    )
    client, llm = await managed_client(make_client, aiohttp_server, tracing=settings)
    target = await start_target(aiohttp_server)
    _, key, install_id = await paid_team_install(client, target.base)
    script_team(llm, target.base)
    headers = {**key, "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}
    response = await client.post(f"/api/installs/{install_id}/run", json={"task": TASK}, headers=headers)
    assert response.status == 200, await response.text()
    run = await response.json()
    assert run["status"] == "completed"
    detail = await (await client.get(f"/api/installs/{install_id}/runs/{run['runId']}", headers=key)).json()
    assert detail["traceId"] == CALLER_TRACE
    assert detail["traceUrl"] == f"{phoenix.base_url}/projects/{project}/traces/{CALLER_TRACE}"

    def whole() -> list[dict[str, Any]]:
        spans = phoenix.trace(CALLER_TRACE)
        names = {s["name"] for s in spans}
        wanted = {"POST /api/installs/{installId}/run", "InstallActor/run", "invoke_agent Worker", "GET"}
        return spans if wanted <= names and any(n.startswith("invoke_workflow") for n in names) else []

    spans = await waiting.eventually(lambda: asyncio.to_thread(whole), "the run's trace in Phoenix", 90)
    assert {s["context"]["trace_id"] for s in spans} == {CALLER_TRACE}, "one trace"
    by_id = {s["context"]["span_id"]: s for s in spans}

    def parent(span: dict[str, Any]) -> str:
        return by_id[span["parent_id"]]["name"] if span["parent_id"] in by_id else span["parent_id"]

    def named(name: str) -> list[dict[str, Any]]:
        return [s for s in spans if s["name"] == name]

    attributes = {s["context"]["span_id"]: flat(s["attributes"]) for s in spans}
    server = named("POST /api/installs/{installId}/run")[0]
    workflow = next(s for s in spans if s["name"].startswith("invoke_workflow"))
    lead, worker = named("invoke_agent Lead")[0], named("invoke_agent Worker")[0]
    # The span tree, with the right parents, across the API process and the install actor.
    assert server["parent_id"] == CALLER_SPAN
    assert parent(named("InstallActor/run")[0]) == server["name"]
    assert parent(workflow) in ("InstallActor/run", server["name"])
    assert parent(lead) == workflow["name"]
    assert parent(named("execute_tool delegate_worker")[0]) == "invoke_agent Lead"
    assert parent(worker) == "execute_tool delegate_worker"
    tools = named("execute_tool http_request")
    assert len(tools) == 2 and {parent(t) for t in tools} == {"invoke_agent Worker"}
    assert parent(named("GET")[0]) == "execute_tool http_request"
    chats = [s for s in spans if s["name"].startswith("chat ")]
    assert sorted(parent(c) for c in chats) == ["invoke_agent Lead"] * 2 + ["invoke_agent Worker"] * 2
    # Token counts equal the run record's.
    record = await store["runs"].find_one({"runId": run["runId"]})
    tokens_in = sum(attributes[c["context"]["span_id"]]["gen_ai.usage.input_tokens"] for c in chats)
    tokens_out = sum(attributes[c["context"]["span_id"]]["gen_ai.usage.output_tokens"] for c in chats)
    assert (tokens_in, tokens_out) == (record["inputTokens"], record["outputTokens"]) == (145, 21)
    # The verdicts and the billed amount, as attributes.
    verdicts = sorted(
        (
            attributes[t["context"]["span_id"]]["http.request.method"],
            attributes[t["context"]["span_id"]]["svc.policy.outcome"],
        )
        for t in tools
    )
    assert verdicts == [("DELETE", "denied"), ("GET", "allowed")]
    run_attributes = attributes[workflow["context"]["span_id"]]
    assert run_attributes["svc.billing.amount_cents"] == 25
    assert run_attributes["svc.billing.pricing_model"] == "per_run"
    assert run_attributes["svc.install.id"] == install_id and run_attributes["svc.run.source"] == "run"
    # No prompt text anywhere (content capture is off by default).
    text = json.dumps(spans)
    for private in (TASK, "Lead the team.", "Do the work.", "all done", "fetched"):
        assert private not in text
    # With SVC_SCREENSHOTS=1 (as for the dashboard's screenshots), Phoenix's own UI is opened at the
    # run detail's link and docs/screenshots/phoenix-run-trace.png refreshed; a browser costs the
    # suite time, so a plain run stops at the API.
    if os.environ.get("SVC_SCREENSHOTS"):
        shown = await asyncio.to_thread(screenshot, detail["traceUrl"])
        assert "invoke_agent Worker" in shown and "svc.billing.amount_cents" in shown


def screenshot(url: str) -> str:
    """Phoenix's page of the trace, with the run's span selected: its text, and its screenshot
    saved as docs/screenshots/phoenix-run-trace.png."""
    from playwright.sync_api import sync_playwright

    from tests.browser.conftest import CHROMIUM_ARGS, SCREENSHOTS, chromium_path

    executable = chromium_path()
    assert executable is not None, "SVC_SCREENSHOTS needs Chromium (apt-get install chromium)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(url, wait_until="domcontentloaded", timeout=120_000)
            page.get_by_text("invoke_agent Worker").first.wait_for(timeout=180_000)
            page.get_by_text("invoke_workflow", exact=False).first.click()
            page.get_by_text("svc.billing.amount_cents").first.wait_for(timeout=60_000)
            image = page.screenshot(full_page=False)
            assert image.startswith(b"\x89PNG")
            (SCREENSHOTS / "phoenix-run-trace.png").write_bytes(image)
            return str(page.inner_text("body"))
        finally:
            browser.close()
