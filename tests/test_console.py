"""Operator console feeds and cancel-run over HTTP (K/S, the caller's installs only)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from tests.support.accounts import bearer, create_key
from tests.support.runtime import managed_client, member, svc_install
from tests.support.waiting import eventually


async def test_feeds_after_a_run(make_client, aiohttp_server, store):
    client, llm = await managed_client(make_client, aiohttp_server)
    caller, key, install_id = await svc_install(client, [member("lead"), member("helper", reportsTo="lead")])
    llm.script(tool_calls=[{"name": "delegate_helper", "arguments": {"task": "t"}}])
    llm.script(text="h")
    llm.script(text="done", input_tokens=9, output_tokens=4)
    run = await (
        await client.post(f"/api/installs/{install_id}/run", json={"task": "go"}, headers=key)
    ).json()

    events = await (await client.get(f"/api/installs/{install_id}/events", headers=caller.cookie)).json()
    assert [(e["eventType"], e["stepKey"]) for e in events["events"]] == [
        ("step_completed", "lead"),
        ("step_completed", "helper"),
    ]
    assert events["events"][0]["meta"] == {"runId": run["runId"]}

    runs = await (await client.get(f"/api/installs/{install_id}/agent-runs?limit=1", headers=key)).json()
    assert [r["agentKey"] for r in runs["runs"]] == ["lead"]
    assert set(runs["runs"][0]) == {
        "id",
        "agentKey",
        "runId",
        "status",
        "inputTokens",
        "outputTokens",
        "errorMessage",
        "createdAt",
    }

    log = (await (await client.get(f"/api/installs/{install_id}/run-log?days=3", headers=key)).json())["days"]
    today = datetime.now(UTC).date()
    assert [d["date"] for d in log] == [(today - timedelta(days=n)).isoformat() for n in (2, 1, 0)]
    assert log[-1] == {"date": today.isoformat(), "ok": 2, "error": 0}
    assert log[0]["ok"] == 0


async def test_feed_queries_are_bounded(make_client, aiohttp_server):
    client, _ = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await svc_install(client, [member("lead")])
    for path in (
        "run-log?days=0",
        "run-log?days=31",
        "run-log?days=x",
        "agent-runs?limit=0",
        "agent-runs?limit=201",
    ):
        response = await client.get(f"/api/installs/{install_id}/{path}", headers=key)
        assert response.status == 400, path
    assert (await client.get(f"/api/installs/{install_id}/run-log?days=30", headers=key)).status == 200


async def test_feeds_are_the_owners_only(make_client, aiohttp_server):
    client, _ = await managed_client(make_client, aiohttp_server)
    _, _, install_id = await svc_install(client, [member("lead")])
    stranger, _, _ = await svc_install(client, [member("lead")])
    other_key = bearer(await create_key(client, stranger))
    for path in ("events", "run-log", "agent-runs", "security/requests", "policies"):
        assert (await client.get(f"/api/installs/{install_id}/{path}", headers=other_key)).status == 404
    assert (await client.post(f"/api/installs/{install_id}/cancel-run", headers=other_key)).status == 404


async def test_cancel_run_during_a_slow_step(make_client, aiohttp_server, store):
    client, llm = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await svc_install(client, [member("lead")])
    response = await client.post(f"/api/installs/{install_id}/cancel-run", headers=key)
    assert response.status == 404
    llm.holding = True  # the step's model call lasts until the run is cancelled
    running = asyncio.ensure_future(
        client.post(f"/api/installs/{install_id}/run", json={"task": "slow"}, headers=key)
    )
    running_runs = {"installId": install_id, "status": "running"}
    await eventually(lambda: store["pipeline_runs"].count_documents(running_runs), "the run to start")
    await eventually(lambda: llm.requests, "the step's model call")  # the step is inside it now
    cancelled = await client.post(f"/api/installs/{install_id}/cancel-run", headers=key)
    assert cancelled.status == 200, await cancelled.text()
    body = await cancelled.json()
    assert body["ok"] is True and body["cancelledStep"] == "lead"
    result = await (await running).json()
    llm.holding = False
    assert result["status"] == "failed" and result["errorMessage"] == "Run cancelled"
    assert result["runId"] == body["runId"]
    events = (await (await client.get(f"/api/installs/{install_id}/events", headers=key)).json())["events"]
    assert events[0]["eventType"] == "step_cancelled" and events[0]["stepKey"] == "lead"
    assert (await store["pipeline_runs"].find_one({"_id": body["runId"]}))["status"] == "failed"
