"""The run path's smaller rules (issue 31, items 4-6): an actor that keeps itself healthy, background
jobs that never wait on each other, and the rules of retries, callbacks, drafts and repeated
commands. Real HTTP to the real app, the embedded database and a real local Ray."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import ray
import time_machine
from aiohttp import web
from ray.experimental import internal_kv

import svc.runtime.ledger as ledger
import svc.runtime.neglected_runs as neglected_runs
from actors import deployment
from actors.runtime import NAMESPACE, actor_name
from api.app import RUNTIME, SERVICES
from svc.core import StartRun, utcnow
from svc.jobs import Jobs
from svc.runtime import CallbackDelivery
from tests.fakes.smtp import SmtpSink
from tests.support.runtime import callback_server, managed_client, member, svc_install, webhook_token
from tests.support.waiting import wait_for, wait_status


async def actor_gone(install_id: str) -> bool:
    try:
        await asyncio.to_thread(ray.get_actor, actor_name(install_id), namespace=NAMESPACE)
    except ValueError:
        return True
    return False


# ---- item 4: the actor keeps itself healthy ----------------------------------------------------


async def test_a_sync_run_past_its_deadline_answers_its_state_and_goes_on(make_client, aiohttp_server, store):
    client, llm = await managed_client(make_client, aiohttp_server, run_wait_seconds=1.0)
    _, key, install_id = await svc_install(client, [member("lead")])
    llm.holding = True  # the model call outlasts the caller's 1 s wait
    llm.script(text="in the end", input_tokens=4)
    response = await client.post(f"/api/installs/{install_id}/run", json={"task": "long"}, headers=key)
    assert response.status == 202
    body = await response.json()
    assert body["status"] == "running" and body["response"] is None
    llm.holding = False
    run = await wait_status(store, body["runId"], "completed")
    assert run["response"] == "in the end" and run["inputTokens"] == 4


async def test_the_actors_clock_survives_a_check_that_fails(make_client, aiohttp_server, store):
    """Reading the published configuration's version fails (a garbled entry in Ray's key-value
    store): the actor still answers runs, and still leaves when idle (its clock used to die on
    that error)."""
    client, llm = await managed_client(make_client, aiohttp_server, actor_idle_seconds=1.0)
    _, key, install_id = await svc_install(client, [member("lead")])
    runtime = client.server.app[RUNTIME]
    llm.script(text="first")
    assert (
        await (await client.post(f"/api/installs/{install_id}/run", json={"task": "a"}, headers=key)).json()
    )["status"] == "completed"
    saved = await asyncio.to_thread(deployment.current_version, runtime.deployment_id)
    assert saved is not None
    key_name = f"version:{runtime.deployment_id}".encode()
    await asyncio.to_thread(
        internal_kv._internal_kv_put,
        key_name,
        b"\xff not text",
        overwrite=True,
        namespace=deployment.KV_NAMESPACE,
    )
    try:
        llm.script(text="second")
        again = await (
            await client.post(f"/api/installs/{install_id}/run", json={"task": "b"}, headers=key)
        ).json()
        assert again["status"] == "completed" and again["response"] == "second"
        assert await wait_for(lambda: actor_gone(install_id), timeout_s=30), "it still leaves when idle"
    finally:
        await asyncio.to_thread(
            internal_kv._internal_kv_put,
            key_name,
            saved.encode(),
            overwrite=True,
            namespace=deployment.KV_NAMESPACE,
        )


async def test_a_command_arriving_as_the_actor_leaves_reaches_the_next_copy(
    make_client, aiohttp_server, store
):
    """Runs sent right at the actor's idle exit: each meets this copy (before it leaves) or the
    next (after), never a 503 or a run settled as gone."""
    client, llm = await managed_client(make_client, aiohttp_server, actor_idle_seconds=0.4)
    _, key, install_id = await svc_install(client, [member("lead")])
    llm.default_text = "done"
    for _ in range(6):
        response = await client.post(f"/api/installs/{install_id}/run", json={"task": "x"}, headers=key)
        assert response.status == 200, await response.text()
        assert (await response.json())["status"] == "completed"
        handle = client.server.app[RUNTIME].actor_handle(install_id)
        if handle is not None:  # wait until it is about to leave (idle for most of its limit)

            async def nearly_idle(handle: Any = handle) -> bool:
                try:
                    return (await handle.status.remote())["idleSeconds"] >= 0.3
                except ray.exceptions.RayError:
                    return True

            assert await wait_for(nearly_idle, timeout_s=30)


async def test_a_run_that_stalls_is_ended_by_the_sweeper_whatever_its_actor(
    make_client, aiohttp_server, store
):
    """A running run with no step for SVC_RUN_STALL_SECONDS ends failed (its actor lives on: an
    abort whose write failed, a call that never returns); its actor's later write is refused."""
    client, llm = await managed_client(make_client, aiohttp_server, run_stall_seconds=1.0)
    _, key, install_id = await svc_install(client, [member("lead")])
    llm.holding = True  # the call answers only once the sweeper has ended the run
    llm.script(text="too late")
    started = await (
        await client.post(f"/api/installs/{install_id}/run", json={"task": "x", "wait": False}, headers=key)
    ).json()
    await wait_status(store, started["runId"], "running")
    jobs = Jobs.for_services(client.server.app[SERVICES])

    async def stalled_out() -> bool:
        await jobs.run("sweep")
        return (await store["pipeline_runs"].find_one({"_id": started["runId"]}))["status"] == "failed"

    assert await wait_for(stalled_out, timeout_s=30)
    run = await store["pipeline_runs"].find_one({"_id": started["runId"]})
    assert run["errorMessage"] == "The run made no progress for too long and was ended"
    assert [r["status"] for r in await store["runs"].find({"runId": started["runId"]}).to_list(None)] == [
        "failed"
    ]
    assert await wait_for(lambda: asyncio.sleep(0, result=len(llm.requests) == 1))
    # The actor's answer comes later: its end write is fenced out; the run stays as settled.
    llm.holding = False
    actor = client.server.app[RUNTIME].actor_handle(install_id)

    async def actor_idle() -> bool:
        return (await actor.status.remote())["active"] == []

    assert await wait_for(actor_idle, timeout_s=30)
    assert (await store["pipeline_runs"].find_one({"_id": started["runId"]}))["status"] == "failed"


# ---- item 5: background work does not wait on itself -------------------------------------------


async def test_a_long_job_never_holds_up_the_callbacks(make_client, aiohttp_server, store):
    """The run poll (standing in for any long job: a month-end charge cycle) hangs; a due callback
    is delivered meanwhile (the jobs used to run one after another)."""
    client = await make_client(rate_limit_multiplier=None)
    services = client.server.app[SERVICES]
    received: list[bytes] = []

    async def hook(request: web.Request) -> web.Response:
        received.append(await request.read())
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    server = await aiohttp_server(app)
    release = asyncio.Event()

    async def slow_poll(now: datetime) -> int:
        await release.wait()
        return 0

    now = utcnow()
    await store["callbacks"].insert_one(
        {
            "_id": "run-1",
            "installId": "install-1",
            "url": str(server.make_url("/hook")),
            "body": json.dumps({"runId": "run-1"}),
            "status": "pending",
            "tries": 0,
            "attempts": [],
            "windowStart": now,
            "nextAttemptAt": now - timedelta(seconds=1),
            "createdAt": now,
        }
    )
    jobs = Jobs(
        store,
        billing_cron="0 0 1 * *",
        charges=None,
        poll=slow_poll,
        poll_seconds=300,
        callbacks=services.callbacks,
    )
    ticking = asyncio.ensure_future(jobs.tick(now))
    try:
        assert await wait_for(lambda: asyncio.sleep(0, result=bool(received)), timeout_s=30)
        assert not ticking.done(), "the poll is still running"
    finally:
        release.set()
        await ticking


async def test_orphans_are_taken_oldest_first(store):
    """Past the batch bound, the oldest orphaned runs are settled first (none waits forever)."""
    base = datetime(2026, 1, 1, tzinfo=UTC)
    for n in (3, 1, 2):
        run = ledger.new_run("install-x", "t", "run", startedAt=base + timedelta(minutes=n))
        run.update(status="running", incarnation="gone")
        await store["pipeline_runs"].insert_one(run)
    found = await neglected_runs.orphaned(store, utcnow(), timedelta(seconds=30), limit=2)
    assert [r["startedAt"].replace(tzinfo=UTC) for r in found] == [
        base + timedelta(minutes=1),
        base + timedelta(minutes=2),
    ]


# ---- item 6: retries, callbacks, drafts, repeated commands -------------------------------------


async def test_two_retries_at_once_queue_one_run(make_client, aiohttp_server, store):
    client, llm = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await svc_install(client, [member("lead")])
    llm.default_text = "ok"
    first = await (
        await client.post(f"/api/installs/{install_id}/run", json={"task": "t"}, headers=key)
    ).json()
    llm.holding = True  # the retry is still running when the later calls arrive
    url = f"/api/installs/{install_id}/runs/{first['runId']}/retry"
    answers = await asyncio.gather(*(client.post(url, headers=key) for _ in range(6)))
    bodies = [await a.json() for a in answers]
    llm.holding = False
    assert {a.status for a in answers} == {202}
    assert len({b["runId"] for b in bodies}) == 1, bodies
    assert await store["pipeline_runs"].count_documents({"retryOf": first["runId"]}) == 1


async def test_a_repeated_start_of_a_completed_run_answers_its_response(make_client, aiohttp_server, store):
    client, llm = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await svc_install(client, [member("lead")])
    llm.script(text="the response", input_tokens=7, output_tokens=3)
    first = await (
        await client.post(f"/api/installs/{install_id}/run", json={"task": "t"}, headers=key)
    ).json()
    run = await store["pipeline_runs"].find_one({"_id": first["runId"]})
    again = await client.server.app[RUNTIME].run(install_id, StartRun(run), 30)
    assert (again.status, again.response, again.inputTokens, again.outputTokens) == (
        "completed",
        "the response",
        7,
        3,
    )
    assert len(llm.requests) == 1


async def test_an_older_callback_attempt_cannot_overwrite_a_newer_outcome(make_client, aiohttp_server, store):
    """An attempt whose lease expired (its process froze) and that answers after the attempt that
    took it over: its outcome is dropped (the final update used to filter on the run id only)."""
    client = await make_client(rate_limit_multiplier=None)
    services = client.server.app[SERVICES]
    answers = [204, 500]

    async def hook(request: web.Request) -> web.Response:
        return web.Response(status=answers.pop(0))

    app = web.Application()
    app.router.add_post("/hook", hook)
    server = await aiohttp_server(app)
    delivery = CallbackDelivery(store, services.vault, True, 30)
    now = utcnow()
    await store["callbacks"].insert_one(
        {
            "_id": "run-2",
            "installId": "install-2",
            "url": str(server.make_url("/hook")),
            "body": "{}",
            "status": "pending",
            "tries": 0,
            "attempts": [],
            "windowStart": now,
            "nextAttemptAt": now,
            "createdAt": now,
        }
    )
    older = await delivery._claim({"_id": "run-2"}, now)
    with time_machine.travel(now + timedelta(minutes=5), tick=False):
        newer = await delivery._claim({"_id": "run-2"}, utcnow())
        assert newer is not None and newer["lease"] != older["lease"]
        assert await delivery._attempt(newer, {"_id": "install-2"}, utcnow())
        assert not await delivery._attempt(older, {"_id": "install-2"}, utcnow())
    doc = await store["callbacks"].find_one({"_id": "run-2"})
    assert doc["status"] == "delivered" and doc["tries"] == 1


async def test_a_cancel_during_a_drafts_send_puts_it_back(make_client, aiohttp_server, store):
    """The Sender step is mailing a draft when the run is cancelled: the draft goes back to approved
    (it used to stay `sending` for ever), and a later send does not mail it twice."""
    sink = await SmtpSink(hold_data=asyncio.Event()).start()
    try:
        client, llm = await managed_client(
            make_client, aiohttp_server, smtp_url=f"smtp://127.0.0.1:{sink.port}"
        )
        team = [member("writer"), member("sender", role="sender")]
        gates = [{"name": "draft-approval", "after": "writer", "kind": "draft-approval"}]
        _, key, install_id = await svc_install(client, team, gates=gates)
        drafts = {"drafts": [{"recipientEmail": "ada@example.com", "subject": "Hi", "body": "Hello"}]}
        llm.script(text=json.dumps(drafts))
        paused = await (
            await client.post(f"/api/installs/{install_id}/run", json={"task": "go"}, headers=key)
        ).json()
        assert paused["pausedAtGate"] == "draft-approval"
        listing = await (await client.get(f"/api/installs/{install_id}/drafts", headers=key)).json()
        draft = listing["drafts"][0]["draft"]
        approved = await client.post(f"/api/installs/{install_id}/drafts/{draft['id']}/approve", headers=key)
        assert approved.status == 200
        assert await wait_for(lambda: asyncio.sleep(0, result=sink.held == 1))
        cancelled = await (await client.post(f"/api/installs/{install_id}/cancel-run", headers=key)).json()
        assert cancelled["cancelledStep"] == "sender"
        await wait_status(store, paused["runId"], "failed")
        assert (await store["drafts"].find_one({"_id": draft["id"]}))["status"] == "approved"
    finally:
        sink.hold_data.set()
        await sink.stop()


async def test_webhook_runs_of_one_install_settle_their_callbacks_once_each(
    make_client, aiohttp_server, store
):
    """Many webhook runs at once on one install: each is recorded once and called back once."""
    client, llm = await managed_client(make_client, aiohttp_server)
    caller, _key, _install_id = await svc_install(client, [member("lead")])
    token = await webhook_token(client, caller)
    received, hook = await callback_server(aiohttp_server)
    llm.default_text = "done"
    answers = await asyncio.gather(
        *(
            client.post(
                f"/api/webhook/{token}",
                json={"inputText": str(n), "callbackUrl": hook},
            )
            for n in range(10)
        )
    )
    ids = {(await a.json())["runId"] for a in answers}
    assert await wait_for(lambda: asyncio.sleep(0, result=len(received) >= 10))
    assert sorted(r["runId"] for r in received) == sorted(ids)
    for run_id in ids:
        assert await store["runs"].count_documents({"runId": run_id}) == 1
