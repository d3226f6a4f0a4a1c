"""GET /api/installs/:installId/runs/:runId/stream over real HTTP, read off the SSE wire (docs/runs.md)."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import ray
from pydantic import TypeAdapter

from api.schemas.run_watch import RunEventStream
from tests.support.accounts import bearer, create_key, signup
from tests.support.installs import install_ok
from tests.support.runs import TEAM, ingest, ingest_body, orch_a_install, start_paperclip
from tests.support.runtime import (
    managed_client,
    member,
    provider_settings,
    start_llm,
    svc_install,
    webhook_token,
)
from tests.support.templates import publish_template, user_with_key
from tests.support.waiting import wait_for, wait_status

READ_TIMEOUT_S = 60.0
EVENT = TypeAdapter(RunEventStream.model_fields["event"].annotation)


async def read_sse(response: Any, on_event: Any = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Every event of the stream until the server closes it: `{id, data}`; and the comment lines."""
    events: list[dict[str, Any]] = []
    comments: list[str] = []
    current: dict[str, Any] = {}
    while True:
        line = await asyncio.wait_for(response.content.readline(), READ_TIMEOUT_S)
        if not line:
            return events, comments
        text = line.decode().rstrip("\n")
        if text.startswith(":"):
            comments.append(text)
        elif text.startswith("id: "):
            current["id"] = int(text[4:])
        elif text.startswith("data: "):
            current["data"] = json.loads(text[6:])
        elif text == "" and current:
            EVENT.validate_python(current["data"])  # each event fits the documented shapes
            events.append(current)
            if on_event is not None:
                await on_event(current)
            current = {}


async def stream(client, key, install_id, run_id, last_id=None, on_event=None):
    headers = dict(key)
    if last_id is not None:
        headers["Last-Event-ID"] = str(last_id)
    response = await client.get(f"/api/installs/{install_id}/runs/{run_id}/stream", headers=headers)
    assert response.status == 200, await response.text()
    assert response.headers["Content-Type"].startswith("text/event-stream")
    return await read_sse(response, on_event)


async def team_install(client):
    """A builder's team (lead delegating to helper) installed by another user."""
    builder = await signup(client)
    builder_key = await create_key(client, builder)
    team = {"version": "v1", "agents": [member("lead"), member("helper", reportsTo="lead")]}
    template = await publish_template(client, builder_key, definition=team)
    deployer = await signup(client)
    deployer_key = await create_key(client, deployer)
    created = await install_ok(client, deployer_key, templateId=template["id"], platform="svc")
    return bearer(builder_key), deployer, bearer(deployer_key), created["installId"]


def script_delegation(llm):
    llm.script(tool_calls=[{"name": "delegate_helper", "arguments": {"task": "dig"}}], input_tokens=9)
    llm.script(
        tool_calls=[{"name": "http_request", "arguments": {"method": "GET", "url": "http://127.0.0.1:9/x"}}],
        input_tokens=8,
    )
    llm.script(text="dug", input_tokens=7)
    llm.script(text="the answer", input_tokens=6)


EXPECTED = [
    ("run_started", "lead"),
    ("step_started", "lead"),
    ("step_started", "helper"),
    ("tool_call", "helper"),
    ("step_finished", "helper"),
    ("step_finished", "lead"),
    ("completed", "lead"),
]


async def test_a_subscriber_on_another_api_process_sees_every_step_in_order(
    make_client, aiohttp_server, store
):
    llm, url = await start_llm(aiohttp_server)
    # After the lead's first answer (its step's first events are stored with it) the run waits in
    # its next model call until the watcher has seen a step.
    llm.hold_after = 1
    first = await make_client(rate_limit_multiplier=None, providers=provider_settings(url))
    second = await make_client(rate_limit_multiplier=None, providers=provider_settings(url))
    _, deployer, key, install_id = await team_install(first)
    script_delegation(llm)
    token = await webhook_token(first, deployer, install_id)
    queued = await first.post(f"/api/webhook/{token}", json={"inputText": "Investigate"})
    run_id = (await queued.json())["runId"]
    status_at_first_step: list[str] = []

    async def note(event: dict[str, Any]) -> None:
        if event["data"]["type"] == "step_started" and not status_at_first_step:
            status_at_first_step.append((await store["pipeline_runs"].find_one({"_id": run_id}))["status"])
            llm.hold_after = None

    events, _comments = await stream(second, key, install_id, run_id, on_event=note)
    # Live: the first step reached the second process while the run was still running there.
    assert status_at_first_step == ["running"]
    assert [(e["data"]["type"], e["data"].get("agent")) for e in events] == EXPECTED
    assert [e["id"] for e in events] == list(range(1, len(EXPECTED) + 1))
    assert all(e["data"]["seq"] == e["id"] for e in events)
    started, tool, finished, end = events[0]["data"], events[3]["data"], events[4]["data"], events[-1]["data"]
    assert started["task"] == "Investigate" and started["source"] == "webhook"
    # The tool call carries the policy decision (no policy: passthrough; loopback refused by the guard?
    # tests allow private addresses, so the request went out and failed to connect).
    assert tool["decision"] == "PASSTHROUGH" and tool["method"] == "GET"
    assert (finished["status"], finished["iterations"], finished["inputTokens"]) == ("completed", 2, 15)
    assert end["response"] == "the answer" and end["inputTokens"] == 30
    await wait_status(store, run_id, "completed")


async def test_a_late_subscriber_resumes_with_last_event_id_and_the_stream_ends(make_client, aiohttp_server):
    client, llm = await managed_client(make_client, aiohttp_server)
    builder_key, _, key, install_id = await team_install(client)
    script_delegation(llm)
    run = await client.post(f"/api/installs/{install_id}/run", json={"task": "Investigate"}, headers=key)
    run_id = (await run.json())["runId"]
    everything, _ = await stream(client, key, install_id, run_id)
    assert [(e["data"]["type"], e["data"].get("agent")) for e in everything] == EXPECTED
    # Resuming after event 3 gives the rest, then the stream closes.
    rest, _ = await stream(client, key, install_id, run_id, last_id=3)
    assert [e["id"] for e in rest] == [4, 5, 6, 7] and rest == everything[3:]
    # After the last event there is nothing more: the stream closes at once.
    assert (await stream(client, key, install_id, run_id, last_id=7))[0] == []
    # The builder's stream leaves out the deployer's task and response.
    seen, _ = await stream(client, builder_key, install_id, run_id)
    assert [e["id"] for e in seen] == [e["id"] for e in everything]
    assert "task" not in seen[0]["data"] and "response" not in seen[-1]["data"]
    assert seen[-1]["data"]["type"] == "completed"


async def test_a_reported_run_ends_its_stream_with_one_event(make_client, aiohttp_server):
    """A run another platform reported (orchA, through its install token): one event from its record."""
    client, _ = await managed_client(make_client, aiohttp_server)
    paperclip = await start_paperclip(aiohttp_server)
    _, key = await user_with_key(client)
    template = await publish_template(client, key, definition=TEAM)
    install, token = await orch_a_install(client, key, paperclip, template["id"])
    agent = next(a["externalId"] for a in install["deployedAgents"] if a["key"] == "lead")
    run_id = uuid.uuid4().hex
    report = ingest_body(agent, runId=run_id, status="failed", errorMessage="boom")
    assert (await ingest(client, token, report)).status == 200
    events, _ = await stream(client, bearer(key), install["installId"], run_id)
    assert [(e["id"], e["data"]["type"], e["data"]["error"]) for e in events] == [(1, "failed", "boom")]


async def test_bad_requests_and_other_tenants(make_client, aiohttp_server):
    client, _llm = await managed_client(make_client, aiohttp_server)
    _, _, key, install_id = await team_install(client)
    run = await client.post(f"/api/installs/{install_id}/run", json={"task": "t"}, headers=key)
    run_id = (await run.json())["runId"]
    path = f"/api/installs/{install_id}/runs/{run_id}/stream"
    stranger = bearer(await create_key(client, await signup(client)))
    response = await client.get(path, headers=stranger)
    assert (response.status, await response.json()) == (404, {"error": "Install not found"})
    response = await client.get(f"/api/installs/{install_id}/runs/{uuid.uuid4().hex}/stream", headers=key)
    assert (response.status, await response.json()) == (404, {"error": "Run not found"})
    response = await client.get(path, headers={**key, "Last-Event-ID": "abc"})
    assert response.status == 400 and "Last-Event-ID" in (await response.json())["error"]
    assert (await client.get(path)).status == 401


async def test_a_paused_run_ends_its_stream_and_a_continue_resumes_it(make_client, aiohttp_server, store):
    client, llm = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await svc_install(
        client, [member("a"), member("b")], gates=[{"name": "g", "after": "a"}]
    )
    llm.script(text="first half")
    response = await client.post(f"/api/installs/{install_id}/run", json={"task": "Go"}, headers=key)
    paused = await response.json()
    assert paused["status"] == "paused"
    events, _ = await stream(client, key, install_id, paused["runId"])
    assert [(e["id"], e["data"]["type"]) for e in events] == [
        (1, "run_started"),
        (2, "step_started"),
        (3, "step_finished"),
        (4, "paused"),
    ]
    assert events[-1]["data"]["gate"] == "g"
    detail = await (
        await client.get(f"/api/installs/{install_id}/runs/{paused['runId']}", headers=key)
    ).json()
    assert (detail["status"], detail["pausedAtGate"], detail["cost"], detail["response"]) == (
        "paused",
        "g",
        None,
        None,
    )
    # Reconnecting after the pause, with nothing new, ends at once.
    assert (await stream(client, key, install_id, paused["runId"], last_id=4))[0] == []

    llm.script(text="second half")
    assert (await client.post(f"/api/installs/{install_id}/continue", json={}, headers=key)).status == 200
    await wait_status(store, paused["runId"], "completed")
    rest, _ = await stream(client, key, install_id, paused["runId"], last_id=4)
    assert [(e["id"], e["data"]["type"], e["data"].get("agent")) for e in rest] == [
        (5, "resumed", None),
        (6, "step_started", "b"),
        (7, "step_finished", "b"),
        (8, "completed", "b"),
    ]
    detail = await (
        await client.get(f"/api/installs/{install_id}/runs/{paused['runId']}", headers=key)
    ).json()
    assert [s["agent"] for s in detail["steps"]] == ["a", "b"]
    assert (detail["status"], detail["pausedAtGate"], detail["response"]) == (
        "completed",
        None,
        "second half",
    )
    assert detail["task"] == "Go"


async def test_a_run_settled_from_outside_its_team_ends_the_stream(make_client, aiohttp_server, store):
    """A run whose worker died past its resumes is settled by the next copy: its stream ends with
    the settlement's own last event, stored like every other (the stream waits for what it checks)."""
    client, llm = await managed_client(make_client, aiohttp_server, run_max_resumes=0)
    llm.hold_calls = {1}  # the run is in its first model call when its worker is killed (never answered)
    _, key, install_id = await svc_install(client, [member("lead")])
    llm.script(text="never")
    running = asyncio.ensure_future(
        client.post(f"/api/installs/{install_id}/run", json={"task": "Go"}, headers=key)
    )
    assert await wait_for(lambda: asyncio.sleep(0, result=bool(llm.requests)))
    run_id = (await store["pipeline_runs"].find_one({"installId": install_id}))["_id"]
    actor = ray.get_actor(f"install:{install_id}", namespace="svc")
    # A crash: Ray restarts the actor, whose new copy may not resume it (no resumes left).
    await asyncio.to_thread(ray.kill, actor, no_restart=False)
    outcome = await (await running).json()
    assert outcome["status"] == "failed"
    ledger = await wait_status(store, run_id, "failed")
    # Nothing of the run was stored before the crash but its claim: its events are its
    # settlement's (the run's own first events rode on a write that never happened).
    events, _ = await stream(client, key, install_id, run_id)
    assert [(e["id"], e["data"]["type"]) for e in events] == [(1, "failed")]
    assert events[-1]["data"]["error"] == ledger["errorMessage"]


async def test_a_stopping_api_process_ends_its_streams_with_a_reconnect_hint(
    make_client, aiohttp_server, store
):
    llm, url = await start_llm(aiohttp_server)
    llm.hold_after = 1  # the helper's call waits until the second process has stopped
    first = await make_client(rate_limit_multiplier=None, providers=provider_settings(url))
    second = await make_client(rate_limit_multiplier=None, providers=provider_settings(url))
    _, deployer, key, install_id = await team_install(first)
    token = await webhook_token(first, deployer, install_id)
    llm.script(tool_calls=[{"name": "delegate_helper", "arguments": {"task": "dig"}}])
    llm.script(text="dug")
    llm.script(text="the answer")
    run_id = (await (await first.post(f"/api/webhook/{token}", json={"inputText": "x"})).json())["runId"]
    response = await second.get(f"/api/installs/{install_id}/runs/{run_id}/stream", headers=key)
    seen = asyncio.Event()

    async def note(event: dict[str, Any]) -> None:
        seen.set()

    reading = asyncio.ensure_future(read_sse(response, note))
    await asyncio.wait_for(seen.wait(), READ_TIMEOUT_S)  # the run's first event
    await second.server.close()  # the second API process stops while its client watches
    events, comments = await reading
    llm.hold_after = None
    assert events and events[-1]["data"]["type"] not in ("completed", "failed")
    assert comments[-1] == ": the service is stopping; reconnect with Last-Event-ID"
    # The client resumes on the other process, after the last event it saw, to the end.
    rest, _ = await stream(first, key, install_id, run_id, last_id=events[-1]["id"])
    assert rest[0]["id"] == events[-1]["id"] + 1 and rest[-1]["data"]["type"] == "completed"
    await wait_status(store, run_id, "completed")
