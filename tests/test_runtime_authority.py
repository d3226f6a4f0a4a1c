"""The install actor as the single authority over its runs (#14), wait:false and retry (#18).

Real HTTP to the real app, the embedded database and a real local Ray; the fake providerA
counts its calls; the install's worker is killed with SIGKILL where a scenario says so.
"""

from __future__ import annotations

import asyncio
import os
import signal
from datetime import UTC, datetime, timedelta
from typing import Any

import ray
import time_machine
from ray.experimental import internal_kv

import svc.runtime.ledger as ledger
from actors import deployment
from actors.install_actor import InstallActor
from actors.runtime import NAMESPACE, actor_name
from api.app import RUNTIME, SERVICES
from svc.core import StartRun, utcnow
from svc.jobs import ACTOR_GONE_AFTER, Jobs
from tests.support.runtime import callback_server, managed_client, member, svc_install, webhook_token
from tests.support.waiting import wait_for, wait_status, wait_until

INTERRUPTED = "stopped during the run"


async def actor_pid(install_id: str) -> int:
    """The install actor's own process id (it reports it)."""
    actor = await asyncio.to_thread(ray.get_actor, actor_name(install_id), namespace=NAMESPACE)
    return int((await actor.status.remote())["pid"])


async def run_record(store: Any, run_id: str) -> list[dict[str, Any]]:
    """The run's records in `runs`, once its end has paid what it owed: the settlement writes them
    just after the write that ends the run (svc/runtime/settlement.py)."""

    async def paid() -> bool:
        run = await store["pipeline_runs"].find_one({"_id": run_id}, {"status": 1, "owed": 1})
        return run is not None and run["status"] in ("completed", "failed") and not run.get("owed")

    assert await wait_for(paid, 60), f"run {run_id} never settled"
    return await store["runs"].find({"runId": run_id}).to_list(None)


async def kill_during_run(store: Any, llm: Any, install_id: str, run_id: str, call: int) -> None:
    """SIGKILL the install's worker while the run is inside its model call number `call` (one of
    `llm.hold_calls`: held in flight, never answered; the next copy's calls are)."""
    await wait_status(store, run_id, "running")
    assert await wait_for(lambda: asyncio.sleep(0, result=len(llm.requests) >= call))
    os.kill(await actor_pid(install_id), signal.SIGKILL)


async def slow_webhook_run(make_client: Any, aiohttp_server: Any) -> tuple[Any, ...]:
    """A webhook run with a callback, its first model call held in flight (`llm.hold_calls`): the
    client, the fake model, the callbacks received, the deployer's key, the install id and the
    webhook's answer."""
    client, llm = await managed_client(make_client, aiohttp_server)
    received, hook = await callback_server(aiohttp_server)
    caller, key, install_id = await svc_install(client, [member("lead")])
    token = await webhook_token(client, caller)
    llm.hold_calls = {1}
    llm.script(text="the answer")
    llm.script(text="the answer")
    queued = await (
        await client.post(f"/api/webhook/{token}", json={"inputText": "x", "callbackUrl": hook})
    ).json()
    return client, llm, received, key, install_id, queued


async def test_cold_scheduled_run_is_recorded_completed(make_client, aiohttp_server, store):
    client, llm = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await svc_install(client, [member("lead")])
    await client.patch(
        f"/api/installs/{install_id}/schedule", json={"cronExpression": "0 0 1 1 *"}, headers=key
    )
    llm.script(text="scheduled work", input_tokens=11, output_tokens=4)
    fired = await (await client.post(f"/api/installs/{install_id}/schedule/trigger", headers=key)).json()
    run = await wait_status(store, fired["runId"], "completed")
    assert run["inputTokens"] == 11 and run["source"] == "schedule" and run["incarnation"]
    records = await run_record(store, fired["runId"])
    assert [(r["status"], r["inputTokens"]) for r in records] == [("completed", 11)], "billed as it ran"
    template_id = (await store.installs.find_one({"_id": install_id}))["templateId"]

    async def summary() -> dict[str, Any] | None:
        # The ledger says completed before the run record and its counters are written.
        listed = await (await client.get(f"/api/runs?templateId={template_id}", headers=key)).json()
        return listed["summary"] if listed["summary"]["totalRuns"] else None

    counted = await wait_until(summary, timeout_s=30)
    assert counted is not None and (counted["totalRuns"], counted["failedRuns"]) == (1, 0)
    assert len(llm.requests) == 1


async def test_a_cancelled_queued_run_never_calls_the_provider(make_client, aiohttp_server, store):
    client, llm = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await svc_install(client, [member("lead")])
    schedule = {"cronExpression": "0 0 1 1 *", "onBacklog": "queue"}
    await client.patch(f"/api/installs/{install_id}/schedule", json=schedule, headers=key)
    llm.hold_calls = {1}  # the first run stays active until the queued one is cancelled
    llm.script(text="the first run")
    first = asyncio.ensure_future(
        client.post(f"/api/installs/{install_id}/run", json={"task": "slow"}, headers=key)
    )
    assert await wait_for(lambda: asyncio.sleep(0, result=bool(llm.requests)))
    fired = await (await client.post(f"/api/installs/{install_id}/schedule/trigger", headers=key)).json()
    queued = await store["pipeline_runs"].find_one({"_id": fired["runId"]})
    assert queued["status"] == "queued", "waits behind the active run"
    cancelled = await client.post(f"/api/installs/{install_id}/cancel-run", headers=key)
    assert await cancelled.json() == {"ok": True, "runId": fired["runId"], "cancelledStep": None}
    llm.hold_calls.clear()
    assert (await (await first).json())["status"] == "completed"
    run = await store["pipeline_runs"].find_one({"_id": fired["runId"]})
    assert run["status"] == "failed" and run["errorMessage"] == "Run cancelled"
    assert [r["status"] for r in await run_record(store, fired["runId"])] == ["failed"], "in analytics"
    # Hand it over as the scheduler and the job runner would: it does not start.
    await client.server.app[RUNTIME].submit(install_id, StartRun(run))
    await Jobs.for_services(client.server.app[SERVICES]).tick()
    assert len(llm.requests) == 1, "the cancelled run never reached the provider"
    again = await client.post(f"/api/installs/{install_id}/cancel-run", headers=key)
    assert again.status == 404


async def test_a_run_refused_by_the_actors_recovery_is_refused_to_the_waiting_caller(
    make_client, aiohttp_server, store
):
    """A sync run queued just before its install was cancelled; the cold actor's recovery starts
    it and refuses it (the install is cancelled) before the caller's own command arrives. That
    command finds the run settled and must give the caller the same answer: refused (409)."""
    client, llm = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await svc_install(client, [member("lead")])
    # The run as `RunService.run` queues it, then the cancellation wins the race to the actor.
    run = ledger.new_run(install_id, "go", "run", handoffAt=utcnow())
    await ledger.enqueue(store, run)
    assert (await client.delete(f"/api/installs/{install_id}", headers=key)).status == 200
    runtime = client.server.app[RUNTIME]
    warm_up = ledger.new_run(install_id, "not stored", "run")
    await runtime.submit(install_id, StartRun(warm_up))  # the actor starts; its recovery runs
    await wait_status(store, run["_id"], "failed")
    outcome = await runtime.run(install_id, StartRun(run), 60)
    assert outcome.refused is True
    assert outcome.errorMessage == "Install is not ready (status: cancelled)"
    assert not llm.requests, "a refused run never reaches the provider"


async def test_an_actor_that_cannot_start_answers_503_and_queued_runs_settle_later(
    make_client, aiohttp_server, store
):
    client, llm = await managed_client(make_client, aiohttp_server)
    caller, key, install_id = await svc_install(client, [member("lead")])
    token = await webhook_token(client, caller)
    runtime = client.server.app[RUNTIME]
    # The deployment's configuration is gone from the cluster: no actor can be built.
    await asyncio.to_thread(
        internal_kv._internal_kv_del,
        f"config:{runtime.deployment_id}".encode(),
        namespace=deployment.KV_NAMESPACE,
    )
    response = await client.post(f"/api/installs/{install_id}/run", json={"task": "now"}, headers=key)
    assert response.status == 503 and response.headers["Retry-After"]
    assert "could not be started" in (await response.json())["error"]
    assert await store["pipeline_runs"].count_documents({"installId": install_id, "status": "queued"}) == 0
    queued = await (await client.post(f"/api/webhook/{token}", json={"inputText": "later"})).json()
    assert queued["status"] == "queued"
    jobs = Jobs.for_services(client.server.app[SERVICES])
    await jobs.tick()
    run = await store["pipeline_runs"].find_one({"_id": queued["runId"]})
    assert run["status"] == "queued", "stays queued while the worker cannot start"
    behind = await (await client.post(f"/api/webhook/{token}", json={"inputText": "after"})).json()
    for run_id, position in ((queued["runId"], 1), (behind["runId"], 2)):
        detail = await (await client.get(f"/api/installs/{install_id}/runs/{run_id}", headers=key)).json()
        assert (detail["status"], detail["queuePosition"]) == ("queued", position)
    assert not llm.requests
    runtime.publish()  # an API process (re)publishes the configuration
    llm.script(text="handed over again")

    async def settled() -> bool:
        await jobs.tick()
        doc = await store["pipeline_runs"].find_one({"_id": queued["runId"]})
        return doc["status"] == "completed"

    assert await wait_for(settled, timeout_s=90)
    # The ledger says completed before the run record is written: wait for the record.
    records = await wait_until(lambda: run_record(store, queued["runId"]), timeout_s=30)
    assert [r["status"] for r in records or []] == ["completed"]


async def test_kill_9_during_a_webhook_run_resumes_it_without_another_call(
    make_client, aiohttp_server, store
):
    client, llm, received, key, install_id, queued = await slow_webhook_run(make_client, aiohttp_server)
    await kill_during_run(store, llm, install_id, queued["runId"], 1)
    # Nobody calls the actor: its restarted copy resumes the run from its journal, making again
    # the model call that died with the first copy, and the callback tells the real end.
    run = await wait_status(store, queued["runId"], "completed")
    assert run["response"] == "the answer" and run["resumes"] == 1
    assert [e["kind"] for e in run["journal"]] == ["lost", "model", "agent"]
    assert await wait_for(lambda: asyncio.sleep(0, result=bool(received)))
    assert received[0]["runId"] == queued["runId"] and received[0]["status"] == "completed"
    assert [r["status"] for r in await run_record(store, queued["runId"])] == ["completed"]
    assert await store["pipeline_events"].count_documents(
        {"eventType": "step_completed", "meta.runId": queued["runId"]}
    )
    llm.replies.clear()
    llm.script(text="next one")
    result = await (
        await client.post(f"/api/installs/{install_id}/run", json={"task": "y"}, headers=key)
    ).json()
    assert result["status"] == "completed" and result["response"] == "next one"


async def test_kill_9_during_a_scheduled_run_and_a_continued_pipeline(make_client, aiohttp_server, store):
    client, llm = await managed_client(make_client, aiohttp_server)
    gates = [{"name": "review", "after": "a"}]
    _, key, install_id = await svc_install(client, [member("a"), member("b")], gates=gates)
    await client.patch(
        f"/api/installs/{install_id}/schedule", json={"cronExpression": "0 0 1 1 *"}, headers=key
    )
    llm.hold_calls = {1}
    llm.script(text="first half")
    llm.script(text="first half")
    fired = await (await client.post(f"/api/installs/{install_id}/schedule/trigger", headers=key)).json()
    await kill_during_run(store, llm, install_id, fired["runId"], 1)
    run = await wait_status(store, fired["runId"], "paused")
    assert run["resumes"] == 1 and run["pausedAtGate"] == "review"
    # A paused pipeline, continued, then its worker killed mid-step: resumed at that step.
    llm.replies.clear()
    llm.script(text="second half")
    llm.script(text="second half")
    llm.hold_calls.add(3)  # after the killed first call and its resumed copy
    assert (await client.post(f"/api/installs/{install_id}/continue", json={}, headers=key)).status == 200
    await kill_during_run(store, llm, install_id, fired["runId"], 3)
    run = await wait_status(store, fired["runId"], "completed")
    assert run["response"] == "second half" and run["resumes"] == 2
    assert [r["status"] for r in await run_record(store, fired["runId"])] == ["completed"]
    assert await wait_for(
        lambda: store["schedules"].count_documents({"_id": install_id, "consecutiveFailures": 0})
    )
    # Past SVC_RUN_MAX_RESUMES (2), a run whose worker dies again ends failed, as before.
    llm.replies.clear()
    llm.script(text="first half")
    again = await (await client.post(f"/api/installs/{install_id}/schedule/trigger", headers=key)).json()
    await wait_status(store, again["runId"], "paused")
    await store["pipeline_runs"].update_one({"_id": again["runId"]}, {"$set": {"resumes": 2}})
    llm.replies.clear()
    llm.script(text="never")
    llm.script(text="never")
    llm.hold_calls.add(6)  # after four calls of the first run and one of this run's first half
    assert (await client.post(f"/api/installs/{install_id}/continue", json={}, headers=key)).status == 200
    await kill_during_run(store, llm, install_id, again["runId"], 6)
    run = await wait_status(store, again["runId"], "failed")
    assert INTERRUPTED in run["errorMessage"]
    assert run["inputTokens"] == 10, "what its first half used is counted"
    assert [(r["status"], r["inputTokens"]) for r in await run_record(store, again["runId"])] == [
        ("failed", 10)
    ]


async def test_an_orphaned_incarnation_cannot_finish_its_run(make_client, aiohttp_server, store):
    client, llm = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await svc_install(client, [member("lead")])
    llm.hold_calls = {1}  # the first copy's call answers only once the new copy has ended the run
    llm.script(text="the answer")
    running = asyncio.ensure_future(
        client.post(f"/api/installs/{install_id}/run", json={"task": "x"}, headers=key)
    )
    assert await wait_for(lambda: asyncio.sleep(0, result=bool(llm.requests)))
    # A second copy of the install's actor takes over (as Ray's restart after a node crash does,
    # while the old worker lives on): the old copy becomes an orphan, the new one resumes the run.
    llm.script(text="the answer")
    runtime = client.server.app[RUNTIME]
    newer = InstallActor.options(max_restarts=0).remote(install_id, runtime.deployment_id)  # type: ignore[attr-defined]
    try:
        assert await newer.ready.remote()
        result = await (await running).json()
        assert result["status"] == "completed", "the caller gets the run's real end"
        run = await store["pipeline_runs"].find_one({"_id": result["runId"]})
        assert run["incarnation"] == (await newer.status.remote())["incarnation"], "ended by the new copy"
        assert [e["kind"] for e in run["journal"]] == ["lost", "model", "agent"]
        assert [r["status"] for r in await run_record(store, result["runId"])] == ["completed"]
        llm.hold_calls.clear()  # the orphan gets its answer now, too late to end the run

        async def orphan_gone() -> bool:
            try:
                await asyncio.to_thread(ray.get_actor, actor_name(install_id), namespace=NAMESPACE)
            except ValueError:
                return True
            return False

        assert await wait_for(orphan_gone, timeout_s=40), "the orphan leaves by itself"
        assert await store["pipeline_runs"].count_documents({"_id": result["runId"], "status": "completed"})
    finally:
        llm.hold_calls.clear()
        await asyncio.to_thread(ray.kill, newer, no_restart=True)


async def test_continue_cancel_and_retry_are_decided_from_the_ledger(make_client, aiohttp_server, store):
    client, llm = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await svc_install(client, [member("lead")])
    _, other_key, other_install = await svc_install(client, [member("lead")])
    no_gate = await client.post(f"/api/installs/{install_id}/continue", json={}, headers=key)
    assert no_gate.status == 409 and await no_gate.json() == {
        "error": "No pending gate found for this install"
    }
    assert (await client.post(f"/api/installs/{install_id}/cancel-run", headers=key)).status == 404
    llm.script(text="async answer", input_tokens=3, output_tokens=2)
    started = await client.post(
        f"/api/installs/{install_id}/run", json={"task": "t1", "wait": False}, headers=key
    )
    assert started.status == 202
    body = await started.json()
    assert body == {"runId": body["runId"], "status": "queued"}
    first = await wait_status(store, body["runId"], "completed")
    assert first["task"] == "t1" and first["source"] == "run"
    # Retry: a new run, same input, linked to the first.
    await store.installs.update_one({"_id": install_id}, {"$set": {"variables": {"X": "now"}}})
    llm.script(text="again")
    retried = await client.post(f"/api/installs/{install_id}/runs/{body['runId']}/retry", headers=key)
    assert retried.status == 202
    second = await retried.json()
    assert second["status"] == "queued" and second["retryOf"] == body["runId"]
    done = await wait_status(store, second["runId"], "completed")
    assert done["task"] == "t1" and done["source"] == "retry" and done["retryOf"] == body["runId"]
    assert llm.requests[-1].body["messages"][0]["content"] == "t1"
    # Unknown run, a run of another install, another tenant's run: 404.
    assert (await client.post(f"/api/installs/{install_id}/runs/nope/retry", headers=key)).status == 404
    assert (
        await client.post(f"/api/installs/{other_install}/runs/{body['runId']}/retry", headers=other_key)
    ).status == 404
    assert (
        await client.post(f"/api/installs/{other_install}/runs/{body['runId']}/retry", headers=key)
    ).status == 404
    # Retry of a run still running: 409.
    llm.hold_after = len(llm.requests)  # the next run stays in its model call until released
    llm.script(text="slow")
    slow = await (
        await client.post(f"/api/installs/{install_id}/run", json={"task": "s", "wait": False}, headers=key)
    ).json()
    await wait_status(store, slow["runId"], "running")
    busy = await client.post(f"/api/installs/{install_id}/runs/{slow['runId']}/retry", headers=key)
    assert busy.status == 409 and "still active" in (await busy.json())["error"]
    llm.hold_after = None
    await wait_status(store, slow["runId"], "completed")


async def test_actors_follow_the_published_configuration(make_client, aiohttp_server, store):
    client, llm = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await svc_install(client, [member("lead")])
    llm.script(text="old provider")
    first = await (
        await client.post(f"/api/installs/{install_id}/run", json={"task": "a"}, headers=key)
    ).json()
    assert first["response"] == "old provider"
    # Another API process starts with a new provider address (a rotated key, a moved provider):
    # it publishes; the warm actor of the install leaves between runs and a fresh one follows.
    second_client, second_llm = await managed_client(make_client, aiohttp_server)
    second_llm.script(text="new provider")
    result = await (
        await client.post(f"/api/installs/{install_id}/run", json={"task": "b"}, headers=key)
    ).json()
    assert result["response"] == "new provider"
    assert len(llm.requests) == 1
    await second_client.close()


async def test_the_sweeper_hands_a_run_whose_actor_is_gone_for_good_to_a_new_copy(
    make_client, aiohttp_server, store
):
    client, llm, received, _key, install_id, queued = await slow_webhook_run(make_client, aiohttp_server)
    await wait_status(store, queued["runId"], "running")
    assert await wait_for(lambda: asyncio.sleep(0, result=bool(llm.requests)))  # inside its model call
    # Gone and not restarted (its node left): no constructor will recover the run.
    actor = await asyncio.to_thread(ray.get_actor, actor_name(install_id), namespace=NAMESPACE)
    await asyncio.to_thread(ray.kill, actor, no_restart=True)  # its held call is never answered
    jobs = Jobs.for_services(client.server.app[SERVICES])

    async def completed() -> bool:
        await jobs.tick()
        run = await store["pipeline_runs"].find_one({"_id": queued["runId"]})
        return run["status"] == "completed"

    # Not before the actor's last beat is ACTOR_GONE_AFTER old: this process's clock (the sweeper's)
    # moves past it instead of the test waiting 30 s; the actor's processes keep the real clock.
    assert not await completed(), "a run whose actor beat a moment ago is left alone"
    with time_machine.travel(datetime.now(UTC) + ACTOR_GONE_AFTER + timedelta(seconds=5), tick=True):
        assert await wait_for(completed, timeout_s=60), "a new copy of the actor resumes it"
    run = await store["pipeline_runs"].find_one({"_id": queued["runId"]})
    assert run["resumes"] == 1 and run["response"] == "the answer"
    assert [r["status"] for r in await run_record(store, queued["runId"])] == ["completed"]
    assert await wait_for(lambda: asyncio.sleep(0, result=bool(received)))
    assert received[0]["status"] == "completed"


async def test_an_actor_at_its_run_bound_keeps_the_next_run_queued_until_a_slot_frees(
    make_client, aiohttp_server, store
):
    """Issue 38, item 5: an actor runs at most SVC_ACTOR_MAX_RUNS at once; the next run waits
    `queued`, first in line, and is claimed only once the running one has ended."""
    client, llm = await managed_client(make_client, aiohttp_server, actor_max_runs=1)
    caller, key, install_id = await svc_install(client, [member("lead")])
    token = await webhook_token(client, caller)
    llm.holding = True  # the first run stays in its model call
    llm.script(text="first")
    llm.script(text="second")
    first = await (await client.post(f"/api/webhook/{token}", json={"inputText": "one"})).json()
    await wait_status(store, first["runId"], "running")
    second = await (await client.post(f"/api/webhook/{token}", json={"inputText": "two"})).json()
    path = f"/api/installs/{install_id}/runs/{second['runId']}"
    detail = await (await client.get(path, headers=key)).json()
    assert (detail["status"], detail["queuePosition"]) == ("queued", 1)
    llm.holding = False
    ended = await wait_status(store, first["runId"], "completed")
    claimed = await wait_status(store, second["runId"], "completed")
    assert claimed["startedAt"] >= ended["endedAt"], "the second run waited for the only slot"
    assert len(llm.requests) == 2, "each run made its one model call"
