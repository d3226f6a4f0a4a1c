"""Traces leave every process and join into one (docs/observability.md, "Traces").

The real app, the install's Ray actor and the embedded database, with OTEL_EXPORTER_OTLP_ENDPOINT
pointed at a local OTLP/HTTP receiver (tests/fakes/otlp.py): what it decodes is what a collector
gets. A caller's `traceparent` makes the run part of the caller's trace across the API process and
the actor; the outbound request and the webhook callback carry the trace on; a malformed header
starts a new trace and is never an error; a collector that refuses loses spans, counted in
/metrics, and never a run; a malformed OTLP setting stops start-up with one line.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from config.tracing import TraceSettings
from tests.fakes.otlp import Collector
from tests.support import waiting
from tests.support.accounts import bearer, create_key, signup
from tests.support.runtime import managed_client, member, start_target, svc_install, webhook_token
from tests.support.templates import publish_template
from tests.test_schedules import make_due

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
ROOT = Path(__file__).resolve().parent.parent


async def traced_app(make_client: Any, aiohttp_server: Any, collector: Collector, **tracing: Any) -> Any:
    """The app and its actors exporting to `collector`; (client, fake provider)."""
    server = await aiohttp_server(collector.app())
    settings = TraceSettings(
        endpoint=Collector.url(server) + "/v1/traces",
        viewer_url="https://phoenix.example/projects/svc/traces/{traceId}",
        **tracing,
    )
    return await managed_client(make_client, aiohttp_server, tracing=settings)


async def paid_team_install(client: Any, target: str) -> tuple[Any, dict[str, str], str]:
    """A per-run priced team: a lead that delegates to a worker allowed /ok on the target only."""
    host = target.split("://")[1].split(":")[0]
    worker_policy = {
        "accessPolicyVersion": "1",
        "defaultAction": "deny",
        "rules": [{"match": {"host": host, "pathPrefix": "/ok"}, "action": "allow"}],
    }
    agents = [
        {"key": "lead", "name": "Lead", "model": "providerA:small", "prompt": "Lead the team."},
        {
            "key": "worker",
            "name": "Worker",
            "model": "providerA:small",
            "prompt": "Do the work.",
            "reportsTo": "lead",
            "accessPolicy": worker_policy,
        },
    ]
    caller = await signup(client)
    key = await create_key(client, caller)
    template = await publish_template(
        client,
        key,
        visibility="public",
        pricingModel="per_run",
        priceUsdCents=25,
        definition={"version": "v1", "agents": agents},
    )
    response = await client.post(
        "/api/installs", json={"templateId": template["id"], "platform": "svc"}, headers=bearer(key)
    )
    assert response.status == 201, await response.text()
    return caller, bearer(key), (await response.json())["installId"]


def script_team(llm: Any, target: str) -> None:
    llm.script(tool_calls=[{"name": "delegate_worker", "arguments": {"task": "fetch"}}], input_tokens=41)
    llm.script(
        tool_calls=[
            {"name": "http_request", "arguments": {"method": "GET", "url": target + "/ok"}},
            {"name": "http_request", "arguments": {"method": "DELETE", "url": target + "/nope"}},
        ],
        input_tokens=33,
        output_tokens=6,
    )
    llm.script(text="fetched", input_tokens=21, output_tokens=2)
    llm.script(text="all done", input_tokens=50, output_tokens=8)


async def test_a_run_is_one_trace_from_the_caller_through_the_actor(make_client, aiohttp_server, store):
    collector = Collector()
    client, llm = await traced_app(make_client, aiohttp_server, collector)
    target = await start_target(aiohttp_server)
    caller, key, install_id = await paid_team_install(client, target.base)
    script_team(llm, target.base)
    headers = {**key, "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}
    response = await client.post(f"/api/installs/{install_id}/run", json={"task": "ship it"}, headers=headers)
    assert response.status == 200, await response.text()
    run = await response.json()
    assert run["status"] == "completed"

    def whole() -> list[Any]:
        # Each process exports its spans in the order they end: the API's server span ends after
        # its hand-over, the actor's run span after everything the run did. With both received,
        # every span of the run is.
        spans = collector.trace(CALLER_TRACE)
        names = [s.name for s in spans]
        ended = "POST /api/installs/{installId}/run" in names and any(
            n.startswith("invoke_workflow") for n in names
        )
        return spans if ended else []

    spans = await waiting.eventually(whole, "the run's spans at the collector")
    byname = {s.name: s for s in spans}
    server = byname["POST /api/installs/{installId}/run"]
    handover = byname["InstallActor/run"]
    workflow = next(s for s in spans if s.name.startswith("invoke_workflow"))
    lead, worker = byname["invoke_agent Lead"], byname["invoke_agent Worker"]
    # The caller's trace, across processes: API (server, hand-over), then the install's actor.
    assert server.parent_id == CALLER_SPAN and server.kind == "SERVER"
    assert handover.parent_id == server.span_id and handover.kind == "CLIENT"
    # A cold actor's start-up may pick the queued run up before the command arrives: the run is
    # then the request's child; a warm actor takes it from the command (below).
    assert workflow.parent_id in (handover.span_id, server.span_id)
    assert lead.parent_id == workflow.span_id
    assert {server.resource["svc.process.kind"], handover.resource["svc.process.kind"]} == {"api"}
    assert workflow.resource["svc.process.kind"] == lead.resource["svc.process.kind"] == "install_actor"
    assert workflow.resource["svc.ray.node_id"] and workflow.resource["service.name"] == "svc"
    assert workflow.resource["process.pid"] != server.resource["process.pid"]
    assert all(s.schema_url == "https://opentelemetry.io/schemas/1.41.0" for s in spans)
    # What no anchor sets: install, template, platform, source, billed amount and pricing model.
    install = await store.installs.find_one({"_id": install_id})
    assert workflow.attributes["svc.install.id"] == install_id
    assert workflow.attributes["svc.template.id"] == install["templateId"]
    assert workflow.attributes["svc.template.version"] == install["templateVersion"]
    assert workflow.attributes["svc.platform"] == "svc" and workflow.attributes["svc.run.source"] == "run"
    assert workflow.attributes["svc.billing.pricing_model"] == "per_run"
    assert workflow.attributes["svc.billing.amount_cents"] == 25
    # Tokens: the chat spans (and the run span) equal the run record.
    record = await store["runs"].find_one({"runId": run["runId"]})
    chats = [s for s in spans if s.name.startswith("chat ") and s.attributes["svc.llm.purpose"] == "agent"]
    assert len(chats) == 4
    assert sum(c.attributes["gen_ai.usage.input_tokens"] for c in chats) == record["inputTokens"] == 145
    assert sum(c.attributes["gen_ai.usage.output_tokens"] for c in chats) == record["outputTokens"]
    assert workflow.attributes["gen_ai.usage.input_tokens"] == record["inputTokens"]
    # The verdicts; the allowed request carried the trace to the target.
    tools = sorted(
        (s for s in spans if s.name == "execute_tool http_request"),
        key=lambda s: s.attributes["http.request.method"],
    )
    assert [(t.attributes["http.request.method"], t.attributes["svc.policy.outcome"]) for t in tools] == [
        ("DELETE", "denied"),
        ("GET", "allowed"),
    ]
    assert all(t.parent_id == worker.span_id for t in tools)
    assert target.received[0]["headers"]["traceparent"].startswith(f"00-{CALLER_TRACE}-")
    # The run detail names the trace and links it.
    detail = await (await client.get(f"/api/installs/{install_id}/runs/{run['runId']}", headers=key)).json()
    assert detail["traceId"] == CALLER_TRACE
    assert detail["traceUrl"] == f"https://phoenix.example/projects/svc/traces/{CALLER_TRACE}"
    page = await client.get(f"/installs/{install_id}/runs/{run['runId']}", headers=caller.cookie)
    assert f'<a href="{detail["traceUrl"]}"' in await page.text(), "the dashboard's run page links it"
    # A warm actor: the run is the child of the hand-over the command carried across Ray.
    llm.script(text="again")
    second = f"{CALLER_TRACE[:-4]}beef"
    headers["traceparent"] = f"00-{second}-{CALLER_SPAN}-01"
    response = await client.post(f"/api/installs/{install_id}/run", json={"task": "again"}, headers=headers)
    assert response.status == 200

    def handed() -> list[Any]:
        found = {s.name.split(" ")[0]: s for s in collector.trace(second)}
        return [found] if {"InstallActor/run", "invoke_workflow"} <= set(found) else []

    found = (await waiting.eventually(handed, "the second run's spans"))[0]
    assert found["invoke_workflow"].parent_id == found["InstallActor/run"].span_id

    # A malformed traceparent is ignored: a new trace starts, never an error.
    for bad in ("00-zzzz-00f067aa0ba902b7-01", f"00-{'0' * 32}-{CALLER_SPAN}-01", "garbage"):
        llm.script(text="done")
        headers["traceparent"] = bad
        response = await client.post(f"/api/installs/{install_id}/run", json={"task": "t"}, headers=headers)
        assert response.status == 200, await response.text()
        run = await response.json()
        detail = await (
            await client.get(f"/api/installs/{install_id}/runs/{run['runId']}", headers=key)
        ).json()
        assert re.fullmatch("[0-9a-f]{32}", detail["traceId"]) and detail["traceId"] != "0" * 32
        servers = await waiting.eventually(
            lambda trace=detail["traceId"]: [s for s in collector.trace(trace) if s.kind == "SERVER"],
            "the request's server span",
        )
        assert servers[0].parent_id is None, "a new trace, not a child of the malformed parent"

    # The webhook: the run and its callback carry the caller's trace on (the callback is signed
    # over its body, so the header changes nothing the receiver checks).
    token = await webhook_token(client, caller, install_id)
    llm.script(text="done by webhook")
    hooked = f"{CALLER_TRACE[:-4]}cafe"
    body = {"inputText": "go", "callbackUrl": target.base + "/callback"}
    headers = {"traceparent": f"00-{hooked}-{CALLER_SPAN}-01"}
    response = await client.post(f"/api/webhook/{token}", json=body, headers=headers)
    assert response.status == 200, await response.text()
    callback = await waiting.eventually(
        lambda: [r for r in target.received if r["path"] == "/callback"], "the callback"
    )
    assert callback[0]["headers"]["traceparent"].startswith(f"00-{hooked}-")
    server = await waiting.eventually(
        lambda: [s for s in collector.trace(hooked) if s.kind == "SERVER"], "the webhook's span"
    )
    assert server[0].name == "POST /api/webhook/{token}" and token not in str(server[0].attributes)
    posted = await waiting.eventually(
        lambda: [
            s for s in collector.trace(hooked) if s.name == "POST" and "/callback" in s.attributes["url.full"]
        ],
        "the callback's client span",
    )
    assert posted[0].resource["svc.process.kind"] == "install_actor"


async def test_a_refusing_collector_loses_spans_not_runs(make_client, aiohttp_server):
    collector = Collector(answer=400)
    client, llm = await traced_app(make_client, aiohttp_server, collector)
    target = await start_target(aiohttp_server)
    _, key, install_id = await paid_team_install(client, target.base)
    for _ in range(2):
        llm.script(text="fine")
        response = await client.post(f"/api/installs/{install_id}/run", json={"task": "t"}, headers=key)
        assert response.status == 200 and (await response.json())["status"] == "completed"

    async def dropped() -> dict[str, float]:
        text = await (await client.get("/metrics")).text()
        found = re.findall(r'svc_trace_spans_dropped_total\{process="(\w+)"\} ([0-9.e+]+)', text)
        return {process: float(value) for process, value in found if float(value) > 0}

    async def both() -> dict[str, float]:
        counted = await dropped()
        return counted if {"api", "install_actor"} <= set(counted) else {}

    await waiting.eventually(both, "spans the API and the install actor lost, in /metrics")
    assert collector.spans == [] and len(collector.headers) >= 2


def test_a_malformed_otlp_setting_stops_start_up_with_one_line(tmp_path):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SVC_", "OTEL_"))}
    base["PYTHONPATH"] = str(ROOT)
    for variable, value in (
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "Authorization"),
        ("OTEL_TRACES_SAMPLER_ARG", "2"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "config.check"],
            cwd=tmp_path,
            env={**base, variable: value},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith(f"error: {variable}=")
        if variable.endswith("HEADERS"):  # collector credentials are never shown
            assert "<hidden>" in done.stderr


async def test_a_scheduled_runs_trace_starts_in_the_scheduler_actor(make_client, aiohttp_server, store):
    collector = Collector()
    server = await aiohttp_server(collector.app())
    settings = TraceSettings(endpoint=Collector.url(server) + "/v1/traces")
    client, llm = await managed_client(make_client, aiohttp_server, tracing=settings, scheduler_enabled=True)
    target = await start_target(aiohttp_server)
    _, _, install_id = await paid_team_install(client, target.base)
    llm.script(text="scheduled work done")
    await make_due(store, install_id)

    async def completed() -> Any:
        run = await store["pipeline_runs"].find_one({"installId": install_id, "source": "schedule"})
        return run if run is not None and run["status"] == "completed" else None

    run = await waiting.wait_until(completed, 90)
    assert run is not None, await store["pipeline_runs"].find({}).to_list(None)
    trace_id = run["trace"]["traceparent"].split("-")[1]

    def both() -> dict[str, Any]:
        found = {s.name.split(" ")[0]: s for s in collector.trace(trace_id)}
        return found if {"schedule", "invoke_workflow"} <= set(found) else {}

    found = await waiting.eventually(both, "the schedule's and the run's spans")
    fire, workflow = found["schedule"], found["invoke_workflow"]
    assert fire.name == "schedule fire" and fire.parent_id is None
    assert fire.resource["svc.process.kind"] == "scheduler"
    assert fire.attributes["svc.install.id"] == install_id
    assert workflow.parent_id == fire.span_id and workflow.resource["svc.process.kind"] == "install_actor"
    assert workflow.attributes["svc.run.source"] == "schedule"


async def test_a_gate_pause_and_its_continue_stay_in_the_runs_trace(make_client, aiohttp_server, store):
    collector = Collector()
    client, llm = await traced_app(make_client, aiohttp_server, collector)
    gates = [{"name": "review", "after": "a"}]
    _, key, install_id = await svc_install(client, [member("a"), member("b")], gates=gates)
    llm.script(text="A out")
    headers = {**key, "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}
    response = await client.post(f"/api/installs/{install_id}/run", json={"task": "go"}, headers=headers)
    paused = await response.json()
    assert paused["status"] == "paused", paused
    llm.script(text="B out")
    other = f"{CALLER_TRACE[:-4]}d00d"
    headers["traceparent"] = f"00-{other}-{CALLER_SPAN}-01"
    response = await client.post(f"/api/installs/{install_id}/continue", json={}, headers=headers)
    assert response.status == 200, await response.text()

    def parts() -> list[Any]:
        found = sorted(
            collector.named("invoke_workflow", CALLER_TRACE), key=lambda s: s.attributes["svc.run.status"]
        )
        return found if len(found) == 2 else []

    resumed, first = await waiting.eventually(parts, "both parts of the run")  # "completed" < "paused"
    assert first.attributes["svc.run.status"] == "paused"
    assert [(name, attrs["svc.gate.name"]) for name, attrs in first.events] == [("svc.gate.paused", "review")]
    assert resumed.attributes["svc.run.status"] == "completed"
    assert [(name, attrs["svc.gate.name"]) for name, attrs in resumed.events] == [
        ("svc.gate.resumed", "review")
    ]
    # The resumed part hangs off the run's origin (the run request); the continue (another trace)
    # is linked.
    origin = await waiting.eventually(  # the API's span is exported by its own batch, maybe later
        lambda: [s for s in collector.trace(CALLER_TRACE) if s.kind == "SERVER"], "the run request's span"
    )
    assert resumed.parent_id == origin[0].span_id
    handover = await waiting.eventually(
        lambda: [s for s in collector.trace(other) if s.name == "InstallActor/resume"],
        "the continue's hand-over",
    )
    assert resumed.links == [(other, handover[0].span_id)]
    await waiting.wait_settled(store, paused["runId"])  # the run record follows the end's write
    record = await store["runs"].find_one({"runId": paused["runId"]})
    chats = [s for s in collector.trace(CALLER_TRACE) if s.name.startswith("chat ")]
    assert sum(c.attributes["gen_ai.usage.input_tokens"] for c in chats) == record["inputTokens"] == 20
