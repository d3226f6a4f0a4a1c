"""Resume after a crash, from the run's journal (issue 38, item 3): the install's actor is killed
(SIGKILL) in the middle of a run; its next copy goes on from the last step it stored. No completed
model call is made again; a request that was in flight is sent again when that is safe (an
idempotent method, or a target that deduplicates by `Idempotency-Key`), else the run waits at an
`outcome-unknown` gate that a person settles. Real HTTP, the embedded database, a real local Ray."""

from __future__ import annotations

import asyncio
import os
import re
import signal
from typing import Any

import ray

from actors.runtime import NAMESPACE, actor_name
from tests.support.accounts import own_origin
from tests.support.runtime import managed_client, member, start_target, svc_install
from tests.support.waiting import wait_for, wait_settled, wait_status


async def kill_actor(install_id: str) -> None:
    actor = await asyncio.to_thread(ray.get_actor, actor_name(install_id), namespace=NAMESPACE)
    os.kill(int((await actor.status.remote())["pid"]), signal.SIGKILL)


def posting(url: str) -> dict[str, Any]:
    return {"name": "http_request", "arguments": {"method": "POST", "url": url, "body": "{}"}}


async def three_steps(
    make_client: Any, aiohttp_server: Any, rule: dict[str, Any] | None = None
) -> tuple[Any, ...]:
    """A lead that delegates to a helper, then POSTs to a target that hangs, then answers: the
    client, the fake model, the target, the key and the install."""
    client, llm = await managed_client(make_client, aiohttp_server)
    target = await start_target(aiohttp_server)
    policy = {"accessPolicyVersion": "1", "rules": [rule]} if rule else None
    lead = member("lead", **({"accessPolicy": policy} if policy else {}))
    caller, key, install_id = await svc_install(client, [lead, member("helper", reportsTo="lead")])
    client.caller = caller  # the owner's session, for the dashboard
    llm.script(tool_calls=[{"name": "delegate_helper", "arguments": {"task": "dig"}}], input_tokens=9)
    llm.script(text="dug", input_tokens=7)
    llm.script(tool_calls=[posting(f"{target.base}/hold/orders")], input_tokens=5)
    llm.script(text="ordered", input_tokens=3)
    return client, llm, target, key, install_id


async def start_and_kill_at_the_post(client: Any, target: Any, key: Any, install_id: str) -> str:
    started = await (
        await client.post(
            f"/api/installs/{install_id}/run", json={"task": "order", "wait": False}, headers=key
        )
    ).json()
    assert await wait_for(lambda: asyncio.sleep(0, result=len(target.received) == 1))
    await kill_actor(install_id)
    target.hold.set()  # the upstream answers now; its caller is dead
    return str(started["runId"])


async def test_a_post_in_flight_waits_at_the_outcome_unknown_gate(make_client, aiohttp_server, store):
    client, llm, target, key, install_id = await three_steps(make_client, aiohttp_server)
    run_id = await start_and_kill_at_the_post(client, target, key, install_id)
    paused = await wait_status(store, run_id, "paused")
    assert paused["pausedAtGate"] == "outcome-unknown"
    assert paused["state"]["call"]["method"] == "POST" and paused["state"]["call"]["url"].endswith(
        "/hold/orders"
    )
    assert len(llm.requests) == 3, "the completed calls were not made again"
    detail = await (await client.get(f"/api/installs/{install_id}/runs/{run_id}", headers=key)).json()
    assert detail["status"] == "paused" and detail["pausedAtGate"] == "outcome-unknown"
    # Continue needs a decision; `resend` sends it again with the same Idempotency-Key.
    bare = await client.post(f"/api/installs/{install_id}/continue", json={}, headers=key)
    assert bare.status == 409 and "needs a decision" in (await bare.json())["error"]
    resend = await client.post(
        f"/api/installs/{install_id}/continue", json={"decision": "resend"}, headers=key
    )
    assert resend.status == 200, await resend.text()
    run = await wait_status(store, run_id, "completed")
    assert run["response"] == "ordered"
    keys = [r["headers"].get("Idempotency-Key") for r in target.received]
    assert len(keys) == 2 and keys[0] and keys[0] == keys[1], "one key for both attempts"
    assert len(llm.requests) == 4, "every completed model call exactly once"
    assert (run["inputTokens"], run["resumes"]) == (9 + 7 + 5 + 3, 1)
    await wait_settled(store, run_id)
    assert await store["runs"].count_documents({"runId": run_id}) == 1


async def test_a_target_that_deduplicates_gets_the_post_again_without_a_gate(
    make_client, aiohttp_server, store
):
    rule = {"match": {"host": "127.0.0.1"}, "action": "allow", "resendAfterCrash": True}
    client, llm, target, key, install_id = await three_steps(make_client, aiohttp_server, rule)
    run_id = await start_and_kill_at_the_post(client, target, key, install_id)
    run = await wait_status(store, run_id, "completed")
    assert run["response"] == "ordered" and run["resumes"] == 1
    keys = [r["headers"].get("Idempotency-Key") for r in target.received]
    assert len(keys) == 2 and keys[0] == keys[1]
    assert len(llm.requests) == 4


async def test_the_operator_settles_an_unknown_outcome_as_done_or_failed(make_client, aiohttp_server, store):
    client, llm, target, key, install_id = await three_steps(make_client, aiohttp_server)
    run_id = await start_and_kill_at_the_post(client, target, key, install_id)
    await wait_status(store, run_id, "paused")
    # Settled from the dashboard: the install page shows the request and the three decisions.
    cookie = client.caller.cookie
    page = await (await client.get(f"/installs/{install_id}", headers=cookie)).text()
    assert 'data-gate="outcome-unknown"' in page and "POST " in page and "/hold/orders" in page
    assert "Treat as done" in page and "Send again" in page and "Fail the run" in page
    token = re.search(r'<meta name="csrf-token" content="([0-9a-f]+)">', page).group(1)
    done = {
        "_csrf": token,
        "runId": run_id,
        "decision": "done",
        "note": "The order went through (checked by hand).",
    }
    answer = await client.post(
        f"/installs/{install_id}/continue",
        data=done,
        headers={**cookie, **own_origin(client)},
        allow_redirects=False,
    )
    assert answer.status == 303, await answer.text()
    await wait_status(store, run_id, "completed")
    assert len(target.received) == 1, "not sent again"
    last = llm.requests[-1].body["messages"][-1]
    assert "checked by hand" in str(last)
    # Another run, killed at its POST, failed by the operator.
    llm.script(tool_calls=[{"name": "delegate_helper", "arguments": {"task": "dig"}}])
    llm.script(text="dug")
    llm.script(tool_calls=[posting(f"{target.base}/hold/again")])
    target.hold.clear()
    target.received.clear()
    second = await start_and_kill_at_the_post(client, target, key, install_id)
    await wait_status(store, second, "paused")
    assert (
        await client.post(f"/api/installs/{install_id}/continue", json={"decision": "fail"}, headers=key)
    ).status == 200
    failed = await wait_status(store, second, "failed")
    assert "outcome" in failed["errorMessage"] or "operator" in failed["errorMessage"]


async def one_held_get(make_client: Any, aiohttp_server: Any) -> tuple[Any, ...]:
    """One agent that GETs from a target that hangs, then answers "read it": the client, the fake
    model, the target, the key and the install."""
    client, llm = await managed_client(make_client, aiohttp_server)
    target = await start_target(aiohttp_server)
    _, key, install_id = await svc_install(client, [member("lead")])
    llm.script(
        tool_calls=[{"name": "http_request", "arguments": {"method": "GET", "url": f"{target.base}/hold/x"}}]
    )
    llm.script(text="read it")
    return client, llm, target, key, install_id


async def test_a_get_in_flight_is_simply_sent_again(make_client, aiohttp_server, store):
    client, llm, target, key, install_id = await one_held_get(make_client, aiohttp_server)
    run_id = await start_and_kill_at_the_post(client, target, key, install_id)
    run = await wait_status(store, run_id, "completed")
    assert run["response"] == "read it" and len(target.received) == 2
    assert "Idempotency-Key" not in target.received[0]["headers"]
    assert len(llm.requests) == 2


async def test_a_journal_that_does_not_fit_the_team_fails_the_run_clearly(make_client, aiohttp_server, store):
    """A resume that meets a step it cannot replay (here: a corrupt entry) ends the run failed with a
    clear message; the actor and the install's next runs are unaffected."""
    client, llm = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await svc_install(client, [member("lead")])
    llm.hold_calls = {1}  # the run is in its model call when its actor is killed (never answered)
    llm.script(text="never")
    started = await (
        await client.post(f"/api/installs/{install_id}/run", json={"task": "x", "wait": False}, headers=key)
    ).json()
    await wait_status(store, started["runId"], "running")
    assert await wait_for(lambda: asyncio.sleep(0, result=bool(llm.requests)))
    await store["pipeline_runs"].update_one({"_id": started["runId"]}, {"$push": {"journal": {"kind": 7}}})
    await kill_actor(install_id)
    run = await wait_status(store, started["runId"], "failed")
    assert run["errorMessage"] == "Cannot resume the run: its journal has an unreadable entry"
    llm.replies.clear()
    llm.script(text="fine")
    after = await (
        await client.post(f"/api/installs/{install_id}/run", json={"task": "y"}, headers=key)
    ).json()
    assert after["status"] == "completed" and after["response"] == "fine"


async def test_a_sync_caller_whose_actor_is_killed_gets_the_resumed_runs_end(
    make_client, aiohttp_server, store
):
    """The caller waits (`wait` true); the copy dies during the command, after it claimed the run.
    The new copy's recovery resumes the run, and the caller gets its real end, not a 503. (A copy
    that dies before its claim is asked again on the live copy: `RayRuntime._send`.)"""
    client, llm, target, key, install_id = await one_held_get(make_client, aiohttp_server)
    waiting = asyncio.ensure_future(
        client.post(f"/api/installs/{install_id}/run", json={"task": "read"}, headers=key)
    )
    assert await wait_for(lambda: asyncio.sleep(0, result=len(target.received) == 1))
    await kill_actor(install_id)
    target.hold.set()
    response = await waiting
    assert response.status == 200, await response.text()
    run = await response.json()
    assert (run["status"], run["response"]) == ("completed", "read it")
    assert len(llm.requests) == 2 and len(target.received) == 2
