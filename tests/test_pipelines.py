"""Pipelines with gates, outreach drafts and the Sender step, over real HTTP."""

from __future__ import annotations

import asyncio
import json

import ray

from svc.core import Mailer
from svc.runtime.pipelines import PipelineExecutor
from tests.support.runtime import managed_client, member, provider_settings, start_llm, svc_install
from tests.support.waiting import wait_status, wait_until


async def start(client, key, install_id, task="Begin"):
    response = await client.post(f"/api/installs/{install_id}/run", json={"task": task}, headers=key)
    assert response.status == 200, await response.text()
    return await response.json()


async def test_three_steps_pause_continue_and_bypass(make_client, aiohttp_server, store):
    client, llm = await managed_client(make_client, aiohttp_server)
    gates = [{"name": "review", "after": "a"}, {"name": "check", "after": "b"}]
    _, key, install_id = await svc_install(client, [member("a"), member("b"), member("c")], gates=gates)
    llm.script(text="A out")
    paused = await start(client, key, install_id)
    assert paused["status"] == "paused" and paused["pausedAtGate"] == "review" and paused["response"] is None
    events = (await (await client.get(f"/api/installs/{install_id}/events", headers=key)).json())["events"]
    assert (events[0]["eventType"], events[0]["gateName"], events[0]["stepKey"]) == (
        "gate_triggered",
        "review",
        "a",
    )

    llm.script(text="B out")
    llm.script(text="C out")
    response = await client.post(
        f"/api/installs/{install_id}/continue", json={"bypassGates": True}, headers=key
    )
    assert response.status == 200 and await response.json() == {"ok": True}
    run = await wait_status(store, paused["runId"], "completed")
    assert llm.requests[1].body["messages"][0]["content"] == "A out", "the gated step's output is passed on"
    assert llm.requests[2].body["messages"][0]["content"] == "B out"
    assert run["inputTokens"] == 30, "tokens add up across the pause"
    again = await client.post(f"/api/installs/{install_id}/continue", json={}, headers=key)
    assert again.status == 409 and await again.json() == {"error": "No pending gate found for this install"}


async def test_a_gate_after_the_last_step_leaves_nothing_to_continue(make_client, aiohttp_server):
    client, llm = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await svc_install(client, [member("only")], gates=[{"name": "end", "after": "only"}])
    llm.script(text="done")
    assert (await start(client, key, install_id))["status"] == "paused"
    response = await client.post(f"/api/installs/{install_id}/continue", json={}, headers=key)
    assert response.status == 409 and await response.json() == {"error": "No agents remaining after gate"}


async def test_a_paused_pipeline_survives_its_actor_and_continues(make_client, aiohttp_server, store):
    client, llm = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await svc_install(
        client, [member("a"), member("b")], gates=[{"name": "g", "after": "a"}]
    )
    llm.script(text="first half")
    paused = await start(client, key, install_id)
    name = f"install:{install_id}"
    actor = ray.get_actor(name, namespace="svc")
    await asyncio.to_thread(ray.kill, actor, no_restart=True)

    def gone() -> bool:
        # ray.kill only asks: until the worker is dead its name still leads to it, and a continue
        # sent meanwhile may be applied by the dying copy (then settled as interrupted).
        return name not in {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)}

    assert await wait_until(lambda: asyncio.to_thread(gone)), "the actor is gone"
    llm.script(text="second half")
    response = await client.post(f"/api/installs/{install_id}/continue", json={}, headers=key)
    assert response.status == 200
    run = await wait_status(store, paused["runId"], "completed")
    assert run["errorMessage"] is None
    assert llm.requests[-1].body["messages"][0]["content"] == "first half"


OUTREACH = [
    member("researcher", prompt="Find people."),
    member("writer", prompt="Write to them."),
    member("sender", role="sender"),
]
OUTREACH_GATES = [
    {"name": "target-review", "after": "researcher", "kind": "target-review"},
    {"name": "draft-approval", "after": "writer", "kind": "draft-approval"},
]


async def test_outreach_targets_drafts_and_the_sender(make_client, aiohttp_server, store):
    client, llm = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await svc_install(client, OUTREACH, gates=OUTREACH_GATES)
    base = f"/api/installs/{install_id}"
    targets = {
        "targets": [
            {
                "githubHandle": "ada",
                "email": "ada@example.com",
                "priorityScore": 9,
                "categoryFit": "high",
                "bio": "x",
            },
            {"githubHandle": "bob", "email": "bob@example.com", "priorityScore": 3},
        ]
    }
    llm.script(text=json.dumps(targets))
    paused = await start(client, key, install_id)
    assert paused["pausedAtGate"] == "target-review"
    queue = await (await client.get(f"{base}/gates/target-review/queue", headers=key)).json()
    assert queue["total"] == 2 and queue["records"][0]["githubHandle"] == "ada"
    assert set(queue["records"][0]) == {
        "id",
        "githubHandle",
        "email",
        "priorityScore",
        "status",
        "categoryFit",
        "bio",
    }
    assert await (await client.get(f"{base}/gates/nope/queue", headers=key)).json() == {
        "records": [],
        "total": 0,
    }

    drafts_out = {
        "drafts": [
            {
                "targetHandle": "ada",
                "recipientEmail": "ada@example.com",
                "subject": "Hi Ada",
                "body": "Hello Ada",
            },
            {
                "targetHandle": "bob",
                "recipientEmail": "bob@example.com",
                "subject": "Hi Bob",
                "body": "Hello Bob",
            },
        ]
    }
    llm.script(text=json.dumps(drafts_out))
    await client.post(f"{base}/continue", json={}, headers=key)
    await wait_status(store, paused["runId"], "paused")
    listed = (await (await client.get(f"{base}/drafts", headers=key)).json())["drafts"]
    assert [d["draft"]["subject"] for d in listed] == ["Hi Bob", "Hi Ada"], "newest first"
    assert listed[1]["target"]["githubHandle"] == "ada"
    ada, bob = listed[1]["draft"]["id"], listed[0]["draft"]["id"]
    assert isinstance(ada, int)

    edited = await (
        await client.patch(f"{base}/drafts/{ada}", json={"subject": "Hello Ada!"}, headers=key)
    ).json()
    assert edited["draft"]["subject"] == "Hello Ada!" and edited["draft"]["editedAt"]
    assert (
        await client.post(f"{base}/drafts/{bob}/reject", json={"note": "too pushy"}, headers=key)
    ).status == 200
    assert (await client.post(f"{base}/drafts/{bob}/reject", json={}, headers=key)).status == 409
    # The last pending draft approved: the pipeline resumes and the Sender mails approved drafts once.
    assert (await client.post(f"{base}/drafts/{ada}/approve", headers=key)).status == 200
    await wait_status(store, paused["runId"], "completed")
    mails = await store["outbox"].find({"kind": "outreach.draft"}).to_list(None)
    assert [(m["to"], m["subject"]) for m in mails] == [("ada@example.com", "Hello Ada!")]
    statuses = {
        d["draft"]["id"]: d["draft"]["status"]
        for d in (await (await client.get(f"{base}/drafts", headers=key)).json())["drafts"]
    }
    assert statuses == {ada: "sent", bob: "rejected"}
    assert (await client.post(f"{base}/drafts/{ada}/recall", headers=key)).status == 409
    events = [
        e["eventType"] for e in (await (await client.get(f"{base}/events", headers=key)).json())["events"]
    ]
    assert "gate_rejected" in events and "gate_approved" in events

    # The rejection note reaches the writer on its next run.
    llm.script(text=json.dumps({"targets": []}))
    second = await start(client, key, install_id, task="Again")
    llm.script(text=json.dumps({"drafts": []}))
    await client.post(f"{base}/continue", json={}, headers=key)
    await wait_status(store, second["runId"], "paused")
    assert "too pushy" in llm.requests[-1].body["messages"][0]["content"]


async def test_bulk_and_draft_errors(make_client, aiohttp_server, store):
    client, llm = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await svc_install(client, OUTREACH[1:], gates=[OUTREACH_GATES[1]])
    base = f"/api/installs/{install_id}"
    drafts_out = {
        "drafts": [{"recipientEmail": f"p{n}@example.com", "subject": f"S{n}", "body": "B"} for n in range(3)]
    }
    llm.script(text=json.dumps(drafts_out))
    await start(client, key, install_id)
    ids = [
        d["draft"]["id"] for d in (await (await client.get(f"{base}/drafts", headers=key)).json())["drafts"]
    ]
    both = await client.post(
        f"{base}/drafts/bulk",
        json={"action": "approve", "ids": ids, "filter": {"status": "approved"}},
        headers=key,
    )
    assert both.status == 400
    assert (await client.post(f"{base}/drafts/bulk", json={"action": "approve"}, headers=key)).status == 400
    count = await (
        await client.post(f"{base}/drafts/bulk", json={"action": "reject", "ids": ids[:2]}, headers=key)
    ).json()
    assert count == {"ok": True, "count": 2}
    requeued = await client.post(
        f"{base}/drafts/bulk", json={"action": "requeue", "filter": {"status": "rejected"}}, headers=key
    )
    assert await requeued.json() == {"ok": True, "count": 2}
    archived = await client.post(
        f"{base}/drafts/bulk", json={"action": "archive", "ids": [ids[0]]}, headers=key
    )
    assert (await archived.json())["count"] == 1
    assert len((await (await client.get(f"{base}/drafts", headers=key)).json())["drafts"]) == 2, (
        "archived is hidden"
    )
    assert (await client.post(f"{base}/drafts/99999/approve", headers=key)).status == 404
    assert (await client.post(f"{base}/drafts/abc/approve", headers=key)).status == 404
    assert (await client.post(f"{base}/drafts/{2**70}/approve", headers=key)).status == 404
    huge = await client.post(f"{base}/drafts/bulk", json={"action": "archive", "ids": [2**70]}, headers=key)
    assert huge.status == 400
    assert (await client.post(f"{base}/drafts/{ids[1]}/recall", headers=key)).status == 409


async def test_a_paused_pipeline_continues_from_another_api_process(make_client, aiohttp_server, store):
    llm, url = await start_llm(aiohttp_server)
    first = await make_client(rate_limit_multiplier=None, providers=provider_settings(url))
    _, key, install_id = await svc_install(
        first, [member("a"), member("b")], gates=[{"name": "g", "after": "a"}]
    )
    llm.script(text="before the restart")
    paused = await start(first, key, install_id)
    await first.close()  # that API process is gone; the pause lives in the database
    second = await make_client(rate_limit_multiplier=None, providers=provider_settings(url))
    llm.script(text="after the restart")
    response = await second.post(f"/api/installs/{install_id}/continue", json={}, headers=key)
    assert response.status == 200
    run = await wait_status(store, paused["runId"], "completed")
    assert run["errorMessage"] is None
    assert llm.requests[-1].body["messages"][0]["content"] == "before the restart"


async def test_bulk_approve_by_filter(make_client, aiohttp_server):
    client, llm = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await svc_install(client, OUTREACH[1:], gates=[OUTREACH_GATES[1]])
    drafts_out = {
        "drafts": [{"recipientEmail": f"p{n}@example.com", "subject": f"S{n}", "body": "B"} for n in range(2)]
    }
    llm.script(text=json.dumps(drafts_out))
    await start(client, key, install_id)
    base = f"/api/installs/{install_id}"
    body = {"action": "approve", "filter": {"status": "pending_approval"}}
    assert await (await client.post(f"{base}/drafts/bulk", json=body, headers=key)).json() == {
        "ok": True,
        "count": 2,
    }
    queue = await (await client.get(f"{base}/gates/draft-approval/queue", headers=key)).json()
    assert queue == {"records": [], "total": 0}


async def test_the_sender_mails_each_approved_draft_once_and_resumes_its_own(store):
    """The Sender step claims each approved draft with a recipient (approved -> sending, by its run)
    before mailing it; a draft its run was sending when the worker stopped is mailed by the resumed
    run; another run's draft, one without a recipient and another install's are left alone."""
    sender = PipelineExecutor(store, Mailer(store))
    drafts = [
        {"_id": 1, "installId": "i1", "status": "approved", "recipientEmail": "a@example.com"},
        {"_id": 2, "installId": "i1", "status": "approved", "recipientEmail": ""},
        {"_id": 3, "installId": "i1", "status": "sending", "sendingRun": "run-1", "recipientEmail": "c@x.io"},
        {"_id": 4, "installId": "i1", "status": "sending", "sendingRun": "run-0", "recipientEmail": "d@x.io"},
        {"_id": 5, "installId": "i2", "status": "approved", "recipientEmail": "e@example.com"},
        {"_id": 6, "installId": "i1", "status": "pending_approval", "recipientEmail": "f@x.io"},
    ]
    await store["drafts"].insert_many([{**d, "subject": f"s{d['_id']}", "body": "b"} for d in drafts])
    assert json.loads(await sender.send_approved("i1", "run-1")) == {"sent": 2}
    statuses = {d["_id"]: d["status"] for d in await store["drafts"].find().to_list(None)}
    assert statuses == {
        1: "sent", 2: "approved", 3: "sent", 4: "sending", 5: "approved", 6: "pending_approval"
    }
    mails = await store["outbox"].find({"kind": "outreach.draft"}).to_list(None)
    assert sorted(m["to"] for m in mails) == ["a@example.com", "c@x.io"]
    assert json.loads(await sender.send_approved("i1", "run-1")) == {"sent": 0}, "nothing is mailed twice"
