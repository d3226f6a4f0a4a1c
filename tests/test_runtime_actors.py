"""Webhook triggers and signed callbacks, orchA heartbeats, and actor life: crash, recovery, eviction."""

from __future__ import annotations

import asyncio
import json

import ray
from aiohttp import web

from svc.runtime.callbacks import sign
from tests.fakes.orch_a import FakePaperclip
from tests.support.accounts import bearer, create_key, signup
from tests.support.runtime import (
    managed_client,
    member,
    svc_install,
    webhook_token,
)
from tests.support.templates import publish_template
from tests.support.waiting import wait_for


async def test_webhook_queues_runs_and_posts_a_signed_callback(make_client, aiohttp_server, store):
    client, llm = await managed_client(make_client, aiohttp_server)
    received: list[tuple[bytes, str]] = []

    async def callback(request: web.Request) -> web.Response:
        received.append((await request.read(), request.headers["Svc-Signature"]))
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", callback)
    hook = await aiohttp_server(app)
    caller, _, install_id = await svc_install(client, [member("lead")])
    token = await webhook_token(client, caller)
    made = await client.post(f"/api/installs/{install_id}/callback-secret", headers=caller.cookie)
    assert made.status == 201, await made.text()
    callback_secret = (await made.json())["callbackSecret"]
    llm.script(text="webhook result", input_tokens=7, output_tokens=3)
    response = await client.post(
        f"/api/webhook/{token}",
        json={"inputText": "from a webhook", "callbackUrl": f"{hook.make_url('/hook')}"},
    )
    assert response.status == 200
    queued = await response.json()
    assert queued["status"] == "queued"
    assert await wait_for(lambda: asyncio.sleep(0, result=bool(received)))
    raw, signature = received[0]
    body = json.loads(raw)
    assert body == {
        "runId": queued["runId"],
        "installId": install_id,
        "status": "completed",
        "response": "webhook result",
        "inputTokens": 7,
        "outputTokens": 3,
    }
    stamp = int(signature.split(",")[0][2:])
    assert signature == sign(raw, callback_secret, stamp), "HMAC-SHA256 of '<t>.<body>', the callback secret"
    assert signature != sign(raw, token, stamp), "never keyed by the webhook token, which starts runs"
    assert llm.requests[0].body["messages"][0]["content"] == "from a webhook"


async def test_webhook_errors(make_client, aiohttp_server, store):
    client, _ = await managed_client(make_client, aiohttp_server)
    response = await client.post("/api/webhook/not-a-token", json={})
    assert response.status == 404 and await response.json() == {"error": "Webhook token not found"}
    caller, _, install_id = await svc_install(client, [member("lead")])
    token = await webhook_token(client, caller)
    assert (await client.post(f"/api/webhook/{token}", json={"inputText": "x" * 100_001})).status == 400
    await store.installs.update_one({"_id": install_id}, {"$set": {"status": "pending"}})
    response = await client.post(f"/api/webhook/{token}", json={})
    assert response.status == 409
    assert await response.json() == {"error": "Install is not ready (status: pending)"}


async def test_orch_a_heartbeat_runs_the_http_agent(make_client, aiohttp_server):
    client, llm = await managed_client(make_client, aiohttp_server)
    paperclip = FakePaperclip()
    server = await aiohttp_server(paperclip.app())
    caller = await signup(client)
    key = await create_key(client, caller)
    team = {"agents": [member("lead", adapterType="http")]}
    template = await publish_template(client, key, visibility="public", definition=team)
    paperclip.companies["c1"] = {"id": "c1", "name": "Acme"}
    body = {
        "templateId": template["id"],
        "companyId": "c1",
        "credentials": {
            "orchABaseUrl": str(server.make_url("")).rstrip("/"),
            "orchAApiKey": paperclip.api_key,
        },
    }
    install = await (await client.post("/api/installs", json=body, headers=bearer(key))).json()
    agent_id = install["deployedAgents"][0]["externalId"]
    config = paperclip.agents[agent_id]["adapterConfig"]
    assert config["url"].endswith("/api/runtime/webhook")
    heartbeat = {
        "runId": "hb-1",
        "agentId": agent_id,
        "companyId": "c1",
        "context": {"taskId": "t-9", "wakeReason": "assignment"},
    }
    refused = await client.post(
        "/api/runtime/webhook", json=heartbeat, headers={"X-Svc-Webhook-Secret": "wrong"}
    )
    assert refused.status == 401
    llm.script(text="heartbeat handled")
    response = await client.post("/api/runtime/webhook", json=heartbeat, headers=config["headers"])
    assert response.status == 200, await response.text()
    assert await response.json() == {
        "runId": "hb-1",
        "agentId": agent_id,
        "companyId": "c1",
        "agentName": "Lead",
        "response": "heartbeat handled",
    }
    assert "assignment" in llm.requests[0].body["messages"][0]["content"]


async def test_a_run_survives_its_actor_being_killed(make_client, aiohttp_server, store):
    client, llm = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await svc_install(client, [member("lead")])
    llm.script(text="warm")
    await client.post(f"/api/installs/{install_id}/run", json={"task": "warm up"}, headers=key)
    # The run's call is in flight when its actor is killed, and never answered: ray.kill only asks,
    # and an answer reaching the dying copy could end the run there.
    llm.hold_calls = {2}
    llm.script(text="the answer")
    llm.script(text="the answer")
    running = asyncio.ensure_future(
        client.post(f"/api/installs/{install_id}/run", json={"task": "slow"}, headers=key)
    )
    assert await wait_for(lambda: asyncio.sleep(0, result=len(llm.requests) == 2))
    actor = ray.get_actor(f"install:{install_id}", namespace="svc")
    await asyncio.to_thread(ray.kill, actor, no_restart=False)
    # The restarted copy resumes the run from its journal (nobody calls it): the model call that
    # died with the first copy is made again, and the waiting caller gets the run's real end.
    result = await (await running).json()
    assert result["status"] == "completed" and result["response"] == "the answer"
    assert len(llm.requests) == 3, "the warm-up, the attempt that died, the attempt that answered"
    run = await store["pipeline_runs"].find_one({"_id": result["runId"]})
    assert run["resumes"] == 1
    assert [e["kind"] for e in run["journal"]] == ["lost", "model", "agent"]
    assert [r["status"] for r in await store["runs"].find({"runId": result["runId"]}).to_list(None)] == [
        "completed"
    ]
    llm.replies.clear()  # the killed call's reply may never have been taken
    llm.script(text="after the crash")
    again = await (
        await client.post(f"/api/installs/{install_id}/run", json={"task": "again"}, headers=key)
    ).json()
    assert again["status"] == "completed" and again["response"] == "after the crash"


async def test_idle_actors_exit(make_client, aiohttp_server):
    client, llm = await managed_client(make_client, aiohttp_server, actor_idle_seconds=1.0)
    _, key, install_id = await svc_install(client, [member("lead")])
    await client.post(f"/api/installs/{install_id}/run", json={"task": "once"}, headers=key)

    async def gone() -> bool:
        try:
            await asyncio.to_thread(ray.get_actor, f"install:{install_id}", namespace="svc")
        except ValueError:
            return True
        return False

    assert not await gone()
    assert await wait_for(gone, timeout_s=30)
    llm.script(text="woken again")
    result = await (
        await client.post(f"/api/installs/{install_id}/run", json={"task": "x"}, headers=key)
    ).json()
    assert result["response"] == "woken again", "a new actor starts on demand"
