"""An MCP tool call waiting for a person and an eval scorecard, in Chromium through the real app
(docs/mcp.md, docs/evals.md, docs/dashboard.md).

The first flow is test_mcp_live's run with a real MCP server (`mcp-server-time`, installed by
scripts/mcp_servers.py into the machine's cache, named in the operator's catalogue): the scripted
model calls `get_current_time` (allowed) and `convert_time` (the policy requires approval), the
install page shows the paused call with its arguments, the person approves it there and the
run completes live; the run page then shows the MCP calls. Without the time server the test
skips as test_mcp_live does (a failure under CI). The second flow runs a draft's eval suite
from its template page and lands on the scorecard: one case passes, one fails.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from config.mcp_catalogue import McpCatalogueEntry
from config.settings import Settings
from scripts.mcp_servers import McpServerUnavailable, time_server
from tests.browser.conftest import Api, LiveServer, Tab
from tests.support.dashboard import agent, seeded_install
from tests.support.mcp import policy, rule, server

CONVERT = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}


@pytest.fixture
def time_executable() -> str:
    """The real `mcp-server-time` (installed once into the machine's cache), or a skip saying why not."""
    try:
        return str(time_server())
    except McpServerUnavailable as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"the real MCP servers cannot run here: {exc}")


@pytest.fixture
def live(
    make_settings: Callable[..., Settings], ray_session: None, request: pytest.FixtureRequest
) -> Iterator[LiveServer]:
    """The service on a real port, its eval cases one at a time (so the fake's scripted replies
    meet them in order) and, for a test that asks for the time server, a catalogue naming it."""
    overrides: dict[str, Any] = {"eval_concurrency": 1}
    if "time_executable" in request.fixturenames:
        executable = request.getfixturevalue("time_executable")
        entry = McpCatalogueEntry(command=executable, args=("--local-timezone", "UTC"), description="Time")
        overrides["mcp_servers"] = {"time": entry}

    def settings(**values: Any) -> Settings:
        return make_settings(**overrides, **values)

    with LiveServer(settings) as service:
        yield service


def call(name: str, arguments: dict[str, Any], n: int) -> dict[str, Any]:
    return {"id": f"call_{n}", "name": name, "arguments": arguments}


def consent_to_all(api: Api, key: str, install_id: str) -> None:
    """Accept every tool the install's MCP servers list (the deployer's consent)."""
    view = api.call("GET", f"/api/installs/{install_id}/mcp", key=key)
    decisions = [
        {"server": s["name"], "tool": t["name"], "digest": t["digest"], "decision": "accept"}
        for s in view["servers"]
        for t in s["tools"]
    ]
    assert {d["tool"] for d in decisions} >= {"get_current_time", "convert_time"}
    api.call("POST", f"/api/installs/{install_id}/mcp/consent", key=key, json={"decisions": decisions})


def test_an_mcp_call_waits_on_the_install_page_until_a_person_approves_it(
    tab: Tab, live: LiveServer, api: Api, time_executable: str
) -> None:
    rules = policy(
        rule("allow", "get_current_time", "time"),
        rule("require_approval", "convert_time", "time"),
        mcp_default="deny",
    )
    lead = agent("lead", accessPolicy=rules, mcpServers=["time"])
    session, key, install_id = seeded_install(api, [lead], mcpServers=[server("time", catalogue="time")])
    consent_to_all(api, key, install_id)
    live.llm.script(
        tool_calls=[
            call("mcp__time__get_current_time", {"timezone": "Europe/Paris"}, 1),
            call("mcp__time__convert_time", CONVERT, 2),
        ]
    )
    live.llm.script(text="It is 21:00 in Tokyo when it is noon in UTC.")
    outcome = api.call(
        "POST", f"/api/installs/{install_id}/run", key=key, json={"task": "Noon UTC in Tokyo?"}
    )
    assert (outcome["status"], outcome["pausedAtGate"]) == ("paused", "tool-approval"), outcome
    run_id = outcome["runId"]

    tab.sign_in_as(session)
    tab.goto(f"/installs/{install_id}")
    page = tab.page
    gate = page.locator(f"[data-paused-run='{run_id}']")
    expect(gate).to_have_attribute("data-gate", "tool-approval")
    expect(gate).to_contain_text("is paused at gate tool-approval")
    expect(gate).to_contain_text("Agent lead asks to call mcp__time__convert_time")
    arguments = gate.get_by_label("Arguments")
    for value in ('"target_timezone": "Asia/Tokyo"', '"time": "12:00"', '"source_timezone": "UTC"'):
        expect(arguments).to_contain_text(value)
    approve = gate.get_by_role("button", name="Approve this call")
    expect(approve).to_be_visible()
    expect(gate.get_by_role("button", name="Reject")).to_be_visible()
    expect(page.locator(f"#runs tr[data-run='{run_id}']")).to_contain_text("paused at tool-approval")
    page.wait_for_selector(".live-dot.on")
    tab.shot("mcp-approval-gate")

    # Approved on the page: the run goes on from its gate and the live table sees it complete.
    approve.click()
    expect(page.locator(f"#runs tr[data-run='{run_id}']")).to_have_attribute(
        "data-status", "completed", timeout=60_000
    )
    expect(page.locator(f"[data-paused-run='{run_id}']")).to_have_count(0)
    approvals = api.call("GET", f"/api/installs/{install_id}/mcp/approvals?status=used", key=key)
    assert [(a["tool"], a["arguments"]) for a in approvals["approvals"]] == [("convert_time", CONVERT)]

    # The run's page: the answer, the lead's step and the MCP calls in the run's security log.
    tab.goto(f"/installs/{install_id}/runs/{run_id}")
    expect(page.locator("h2")).to_contain_text("completed")
    expect(page.locator(".run-task")).to_have_text("Noon UTC in Tokyo?")
    expect(page.locator(".run-response")).to_have_text("It is 21:00 in Tokyo when it is noon in UTC.")
    expect(page.locator("table.steps tbody tr[data-agent='lead']")).to_contain_text("providerA:small")
    # Each MCP call in the run's security log: allowed, stopped for approval, then made approved.
    log = page.locator("h3:has-text('Security log of this run') + table tbody tr")
    expect(log).to_have_count(3)
    seen = [[cell.strip() for cell in row.locator("td").all_text_contents()[1:]] for row in log.all()]
    assert seen == [
        ["lead", "MCP time/get_current_time", "ALLOW", "", "200"],
        ["lead", "MCP time/convert_time", "BLOCK", "Awaiting approval", "—"],
        ["lead", "MCP time/convert_time", "ALLOW", "", "200"],
    ], seen
    detail = api.call("GET", f"/api/installs/{install_id}/runs/{run_id}", key=key)
    verdicts = [(e["mcp"]["tool"], e["mcp"]["verdict"]) for e in detail["security"] if e.get("kind") == "mcp"]
    assert verdicts[:2] == [("get_current_time", "allowed"), ("convert_time", "approval_required")]
    tab.shot("run-detail-mcp")
    assert tab.errors == []


def test_a_suite_run_from_the_template_page_lands_on_its_scorecard(
    tab: Tab, live: LiveServer, api: Api
) -> None:
    session = api.signup(f"b-{uuid.uuid4().hex[:10]}@example.com")
    key = api.call("POST", "/api/auth/keys", session=session, json={"label": "evals"})["key"]
    cases = [
        {
            "name": "greets",
            "task": "Greet {{company}}",
            "variables": {"company": "Acme"},
            "mustPass": True,
            "checks": [{"kind": "contains", "text": "hello acme"}],
        },
        {
            "name": "polite",
            "task": "Answer {{company}}'s complaint",
            "variables": {"company": "Acme"},
            "checks": [{"kind": "notContains", "text": "go away"}],
        },
    ]
    definition = {
        "version": "v1",
        "agents": [agent("lead", prompt="You greet {{company}}.")],
        "requiredVariables": ["company"],
        "evals": {"passRate": 1.0, "cases": cases},
    }
    body = {"slug": f"t-{uuid.uuid4().hex[:10]}", "name": "Greeter", "definition": definition}
    template = api.call("POST", "/api/templates", key=key, json=body)
    live.llm.script(text="Hello Acme, welcome!")  # the cases run one at a time, in order
    live.llm.script(text="Go away.")

    tab.sign_in_as(session)
    tab.goto(f"/templates/{template['id']}")
    page = tab.page
    page.get_by_role("button", name="Run eval suite (2 cases)").click()
    page.wait_for_url(re.compile(rf"/templates/{template['id']}/evals/[^/]+$"), timeout=90_000)
    summary = page.locator("section.panel").first
    expect(summary).to_contain_text("failed")
    expect(summary).to_contain_text("pass rate 50% (needs 100%)")
    expect(summary).to_contain_text("1 passed, 1 failed, 0 errors of 2")
    rows = page.locator("table.list tbody tr")
    expect(rows).to_have_count(2)
    greets = rows.filter(has_text="greets")
    polite = rows.filter(has_text="polite")
    expect(greets.locator("td:nth-child(2)")).to_have_text("pass")
    expect(polite.locator("td:nth-child(2)")).to_have_text("fail")
    expect(polite.locator("td:nth-child(3)")).to_contain_text("go away")
    expect(greets.get_by_role("link", name="run detail")).to_be_visible()
    # The page shows the scorecard the API stores.
    scorecard_id = page.url.rsplit("/", 1)[-1]
    card = api.call("GET", f"/api/templates/{template['id']}/evals/scorecards/{scorecard_id}", key=key)
    assert card["passRate"] == 0.5 and card["status"] == "failed"
    assert {c["name"]: c["status"] for c in card["cases"]} == {"greets": "pass", "polite": "fail"}
    tab.shot("eval-scorecard")
    assert tab.errors == []
