"""A managed run's end (issue 31): one owner of its record, one write for its end, and what that
write owes paid exactly once whatever dies in between. Real HTTP to the real app, the embedded
database (with fault injection: tests/support/faults.py), a real local Ray; the install's actor is
cut dead at each point of the end (`SVC_CRASH_POINTS`, svc/runtime/faults.py)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from api.app import SERVICES, create_app
from api.context import SETTINGS
from svc.core import iso
from svc.jobs import Jobs
from tests.support import faults
from tests.support.accounts import bearer, create_key, signup
from tests.support.installs import install_ok, mine
from tests.support.runs import ingest, issue_token
from tests.support.runtime import callback_server, managed_client, member, webhook_token
from tests.support.templates import publish_template
from tests.support.waiting import wait_for, wait_status, wait_until

MANAGED_REPORT = (
    "This install runs on the managed runtime, which records every run itself; run reports are refused"
)


async def paid_svc_install(
    client: Any, agents: list[dict[str, Any]], price: int = 25
) -> tuple[Any, Any, str]:
    """A builder's per-run template and a deployer's svc install: (deployer, deployer key, install)."""
    deployer = await signup(client)
    key = await create_key(client, deployer)
    team = {"version": "v1", "agents": agents}
    template = await publish_template(
        client, key, definition=team, pricingModel="per_run", priceUsdCents=price
    )
    created = await install_ok(client, key, templateId=template["id"], platform="svc")
    return deployer, bearer(key), created["installId"]


async def listed(client: Any, key: Any, install_id: str, store: Any) -> dict[str, Any]:
    """GET /api/runs of the install's template (the run list, counted from the counters)."""
    template_id = (await store.installs.find_one({"_id": install_id}))["templateId"]
    return await (await client.get(f"/api/runs?templateId={template_id}", headers=key)).json()


async def billed(client: Any, key: Any, install_id: str, store: Any) -> dict[str, Any]:
    template_id = (await store.installs.find_one({"_id": install_id}))["templateId"]
    url = f"/api/billing?templateId={template_id}&installId={install_id}"
    return await (await client.get(url, headers=key)).json()


async def settled_once(client: Any, key: Any, install_id: str, store: Any, run_id: str, status: str) -> None:
    """The run is in the run list and billing exactly once, with exact counters, owing nothing."""
    run = await wait_status(store, run_id, status)

    async def paid() -> bool:
        doc = await store["pipeline_runs"].find_one({"_id": run_id})
        return not doc.get("owed")

    assert await wait_for(paid), "everything the end owed is paid"
    records = await store["runs"].find({"runId": run_id}).to_list(None)
    assert [(r["status"], r["inputTokens"], r["outputTokens"]) for r in records] == [
        (status, run["inputTokens"], run["outputTokens"])
    ]
    runs = await listed(client, key, install_id, store)
    assert runs["summary"]["totalRuns"] == 1
    assert (runs["summary"]["totalInputTokens"], runs["summary"]["totalOutputTokens"]) == (
        run["inputTokens"],
        run["outputTokens"],
    )
    assert [r["id"] for r in runs["runs"]] == [run_id]
    usage = (await billed(client, key, install_id, store))["usage"]
    assert usage["totalRuns"] == 1 and usage["completedRuns"] == (1 if status == "completed" else 0)


async def test_a_deployer_cannot_make_a_paid_managed_run_free(make_client, aiohttp_server, store):
    """Issue 31, item 1: a self-report (or an ingest) naming a running webhook run's id used to take
    its record's place; the runtime's own record was then refused and the run was never billed."""
    client, llm = await managed_client(make_client, aiohttp_server)
    deployer, key, install_id = await paid_svc_install(client, [member("lead")])
    token = await webhook_token(client, deployer, install_id)
    llm.holding = True  # the run stays in its model call while the reports are refused
    llm.script(text="done", input_tokens=10, output_tokens=5)
    queued = await (await client.post(f"/api/webhook/{token}", json={"inputText": "work"})).json()
    await wait_status(store, queued["runId"], "running")
    report = {
        "agentKey": "lead",
        "status": "failed",
        "runId": queued["runId"],
        "inputTokens": 0,
        "outputTokens": 0,
    }
    response = await client.post(f"/api/installs/{install_id}/runs", json=report, headers=key)
    assert response.status == 409 and (await response.json())["error"] == MANAGED_REPORT
    install_token = await issue_token(client, install_id)
    ingested = await ingest(
        client, install_token, {**report, "platform": "svc", "platformAgentId": None, "agentKey": "lead"}
    )
    assert ingested.status == 409 and (await ingested.json())["error"] == MANAGED_REPORT
    assert await store["runs"].count_documents({"runId": queued["runId"]}) == 0, "nothing written"
    llm.holding = False
    await settled_once(client, key, install_id, store, queued["runId"], "completed")
    assert (await billed(client, key, install_id, store))["billing"]["totalAmountCents"] == 25


@pytest.mark.parametrize(
    ("point", "model_calls"),
    [("before-end", 2), ("after-end", 1), ("after-settlement", 1)],
)
async def test_a_crash_at_each_point_of_the_end_loses_and_doubles_nothing(
    make_client, aiohttp_server, store, point, model_calls
):
    """Issue 31, item 2: the actor dies at each point of a webhook run's end; its next copy (Ray
    restarts it at once) finishes the job: the run is in the run list and billing once, its
    counters exact, its callback delivered once. Before the end write, the answer died with the
    actor: the model call is made again (its lost attempt recorded), never after it."""
    client, llm = await managed_client(make_client, aiohttp_server, crash_points=frozenset({point}))
    received, hook = await callback_server(aiohttp_server)
    deployer, key, install_id = await paid_svc_install(client, [member("lead")])
    token = await webhook_token(client, deployer, install_id)
    llm.script(text="the answer", input_tokens=10, output_tokens=5)
    llm.script(text="the answer", input_tokens=10, output_tokens=5)
    queued = await (
        await client.post(f"/api/webhook/{token}", json={"inputText": "work", "callbackUrl": hook})
    ).json()
    jobs = Jobs.for_services(client.server.app[SERVICES])

    async def called_back() -> bool:
        await jobs.run("callbacks")  # the job runner retries a callback the crash left unsent
        return bool(received)

    assert await wait_for(called_back)
    await settled_once(client, key, install_id, store, queued["runId"], "completed")
    assert [(r["runId"], r["status"], r["response"]) for r in received] == [
        (queued["runId"], "completed", "the answer")
    ]
    assert len(llm.requests) == model_calls
    run = await store["pipeline_runs"].find_one({"_id": queued["runId"]})
    lost = [e for e in run["journal"] if e["kind"] == "lost"]
    assert len(lost) == model_calls - 1
    assert (run["inputTokens"], run["outputTokens"]) == (10, 5), "the lost attempt's tokens are unknown"


async def test_a_crash_after_a_step_resumes_without_repeating_it(make_client, aiohttp_server, store):
    """The actor dies right after a step was stored: the new copy replays the stored steps and
    makes only the calls that never happened."""
    client, llm = await managed_client(make_client, aiohttp_server, crash_points=frozenset({"after-step"}))
    _deployer, key, install_id = await paid_svc_install(
        client, [member("lead"), member("helper", reportsTo="lead")]
    )
    llm.script(tool_calls=[{"name": "delegate_helper", "arguments": {"task": "dig"}}], input_tokens=9)
    llm.script(text="dug", input_tokens=7)
    llm.script(text="the answer", input_tokens=6)
    result = await (
        await client.post(f"/api/installs/{install_id}/run", json={"task": "go"}, headers=key)
    ).json()
    assert result["status"] == "completed" and result["response"] == "the answer"
    assert len(llm.requests) == 3, "no model call made twice"
    assert (result["inputTokens"], result["outputTokens"]) == (22, 15)
    await settled_once(client, key, install_id, store, result["runId"], "completed")


async def test_the_database_failing_at_the_end_write_or_the_settlement(make_client, aiohttp_server, store):
    """Issue 31, item 2, with the database instead of the actor: the end write fails (the run is
    resumed from its journal by the actor's next beat), or the settlement's batch fails (the next
    beat pays it). Either way the run is recorded once and the caller gets its real end."""
    client, llm = await managed_client(make_client, aiohttp_server, actor_idle_seconds=4.0)
    _, key, install_id = await paid_svc_install(client, [member("lead")])
    llm.script(text="warm")
    assert (
        await (await client.post(f"/api/installs/{install_id}/run", json={"task": "w"}, headers=key)).json()
    )["status"] == "completed"
    # The end write (an update) fails, and so may a beat or two in the same moment.
    llm.hold_calls = {2}  # the run's call answers once the faults are armed
    llm.script(text="first", input_tokens=10, output_tokens=5)
    llm.script(text="first", input_tokens=10, output_tokens=5)
    running = asyncio.ensure_future(
        client.post(f"/api/installs/{install_id}/run", json={"task": "a"}, headers=key)
    )
    assert await wait_for(lambda: asyncio.sleep(0, result=len(llm.requests) == 2))
    await faults.fail(store, ["update"], times=5)
    llm.hold_calls.clear()
    first = await (await running).json()
    assert first["status"] == "completed" and first["response"] == "first"
    assert len(llm.requests) == 3, "the answer lost with the failed end write is asked again"
    # The settlement's batch fails once: the run ended; the next beat pays what it owes.
    await faults.fail(store, ["bulkWrite"], times=1)
    llm.script(text="second", input_tokens=3, output_tokens=2)
    second = await (
        await client.post(f"/api/installs/{install_id}/run", json={"task": "b"}, headers=key)
    ).json()
    assert second["status"] == "completed"

    async def owes_nothing() -> bool:
        doc = await store["pipeline_runs"].find_one({"_id": second["runId"]})
        return not doc["owed"]

    assert await wait_for(owes_nothing)
    for run_id in (first["runId"], second["runId"]):
        assert await store["runs"].count_documents({"runId": run_id}) == 1
    summary = (await listed(client, key, install_id, store))["summary"]
    assert (summary["totalRuns"], summary["totalInputTokens"]) == (3, 10 + 10 + 3)


async def test_a_cancelled_run_records_the_tokens_it_used(make_client, aiohttp_server, store):
    """Issue 31, item 3: a run cancelled after a model call answered records that call's tokens."""
    client, llm = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await paid_svc_install(client, [member("lead"), member("helper", reportsTo="lead")])
    llm.script(
        tool_calls=[{"name": "delegate_helper", "arguments": {"task": "dig"}}],
        input_tokens=40,
        output_tokens=8,
    )
    # The helper's model call hangs; the lead's answer (40/8) is stored by then.
    llm.hold_after = 1
    started = await (
        await client.post(f"/api/installs/{install_id}/run", json={"task": "go", "wait": False}, headers=key)
    ).json()
    assert await wait_for(lambda: asyncio.sleep(0, result=len(llm.requests) == 2))
    cancelled = await (await client.post(f"/api/installs/{install_id}/cancel-run", headers=key)).json()
    assert cancelled == {"ok": True, "runId": started["runId"], "cancelledStep": "helper"}
    run = await wait_status(store, started["runId"], "failed")
    assert run["errorMessage"] == "Run cancelled" and (run["inputTokens"], run["outputTokens"]) == (40, 8)
    await settled_once(client, key, install_id, store, started["runId"], "failed")
    steps = await store["agent_runs"].find({"runId": started["runId"]}).to_list(None)
    assert sorted((s["agentKey"], s["status"], s["errorMessage"]) for s in steps) == [
        ("helper", "failed", "Run cancelled"),
        ("lead", "failed", "Run cancelled"),
    ]


async def test_runs_started_together_cannot_all_pass_a_cap_only_one_fits(make_client, aiohttp_server, store):
    """Issue 31, item 3: the cap reserves for the runs in flight (the install's actor runs them
    all): two runs of a 25-cent template under a 25-cent cap, started at once: one runs."""
    client, llm = await managed_client(make_client, aiohttp_server)
    deployer, key, install_id = await paid_svc_install(client, [member("lead")])
    limits = await client.patch(
        f"/api/installs/{install_id}/limits", json={"monthlyCapCents": 25}, headers=key
    )
    assert limits.status == 200, await limits.text()
    token = await webhook_token(client, deployer, install_id)
    llm.holding = True  # the run that fits stays in flight until the other one is decided
    llm.script(text="one")
    llm.script(text="two")
    queued = await asyncio.gather(
        *(client.post(f"/api/webhook/{token}", json={"inputText": f"run {n}"}) for n in range(2))
    )
    ids = [(await response.json())["runId"] for response in queued]

    async def decided() -> bool:
        refused = await store["pipeline_runs"].count_documents({"_id": {"$in": ids}, "status": "failed"})
        return bool(refused) or len(llm.requests) == 2

    assert await wait_for(decided)
    llm.holding = False
    ended = [await wait_until(lambda i=i: _ended(store, i)) for i in ids]
    assert sorted(run["status"] for run in ended) == ["completed", "failed"]
    refused = next(run for run in ended if run["status"] == "failed")
    assert refused["errorMessage"].startswith("Monthly spend cap reached")
    assert len(llm.requests) == 1, "the refused run never reached the provider"


async def _ended(store: Any, run_id: str) -> dict[str, Any] | None:
    run = await store["pipeline_runs"].find_one({"_id": run_id})
    return run if run is not None and run["status"] in ("completed", "failed") else None


async def test_an_actor_dying_before_it_claims_a_sync_run_hands_it_to_its_next_copy(
    make_client, aiohttp_client, aiohttp_server, store
):
    """The actor dies after it took the command and before it claimed the run (on a cluster: a
    copy on a node that has just gone), so the run is still queued. The caller, on a second API
    process of the deployment that has not spoken to that actor before, gets the run's end from
    the next copy, not a 503, and the run is made once."""
    client, llm = await managed_client(make_client, aiohttp_server, crash_points=frozenset({"before-claim"}))
    _deployer, key, install_id = await paid_svc_install(client, [member("lead")])
    other = await aiohttp_client(create_app(client.server.app[SETTINGS]))
    llm.script(text="the answer", input_tokens=10, output_tokens=5)
    response = await other.post(f"/api/installs/{install_id}/run", json={"task": "go"}, headers=key)
    assert response.status == 200, await response.text()
    result = await response.json()
    assert (result["status"], result["response"]) == ("completed", "the answer")
    assert len(llm.requests) == 1, "the run was made once, by the next copy"
    await settled_once(client, key, install_id, store, result["runId"], "completed")


async def test_an_install_shows_its_last_run_from_its_counters(make_client, aiohttp_server, store):
    """A run's settlement writes no install document: the install's `lastRunAt` (GET
    /api/installs/mine) is its all-time run counter's, there as soon as the run has answered. An
    install whose own document holds a later time (written by an earlier release) shows that."""
    client, llm = await managed_client(make_client, aiohttp_server)
    deployer, key, install_id = await paid_svc_install(client, [member("lead")])
    [fresh] = [item for item in await mine(client, deployer) if item["id"] == install_id]
    assert fresh["lastRunAt"] is None
    llm.script(text="done")
    response = await client.post(f"/api/installs/{install_id}/run", json={"task": "t"}, headers=key)
    answer = await response.json()
    assert answer["status"] == "completed"
    record = await store["runs"].find_one({"runId": answer["runId"]})
    [item] = [item for item in await mine(client, deployer) if item["id"] == install_id]
    assert item["lastRunAt"] == iso(record["createdAt"])
    assert "lastRunAt" not in await store.installs.find_one({"_id": install_id}), "no install write"
    later = record["createdAt"] + timedelta(hours=1)
    await store.installs.update_one({"_id": install_id}, {"$set": {"lastRunAt": later}})
    [item] = [item for item in await mine(client, deployer) if item["id"] == install_id]
    assert item["lastRunAt"] == iso(later)
