"""The run ledger: every change of a managed run's status, one function per transition.

Each transition is one conditional write from the expected state, so two writers can never
both win, and every write an install's actor makes to a run it has claimed names the actor's
incarnation: a copy of the actor that a newer one has superseded (an orphan left by a node
crash) matches nothing, so it can neither finish nor pause a run (docs/runtime.md).

    queued --claim--> running --pause--> paused --resume--> running
       |                 |                                     |
       +--fail_queued--> failed <--finish/settle------ completed/failed

Who writes: the API and the scheduler only *ask* (`enqueue` a queued run, `fail_queued` a run
they could never hand over); the install's actor claims, pauses, resumes and finishes; the
actor's recovery and the sweeper `settle` runs whose actor is gone. A per-install incarnation
record (`actor_incarnations`) names the copy of the actor that may act; it is claimed in the
actor's constructor and beaten while the actor lives, so the sweeper can tell a gone actor.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from plugins import tracing
from svc.core import Document, Store, tokens, utcnow

RUNS = "pipeline_runs"
INCARNATIONS = "actor_incarnations"
ACTIVE = ("queued", "starting", "running")
Source = str  # run, webhook, schedule, continue, retry, heartbeat


def new_run(install_id: str, task: str, source: Source, **extra: Any) -> Document:
    """A queued run's document (the fields h-watch's run detail reads)."""
    return {
        "_id": tokens.new_id(),
        "installId": install_id,
        "status": "queued",
        "task": task,
        "source": source,
        "retryOf": None,
        "createdAt": utcnow(),
        "startedAt": None,
        "endedAt": None,
        "errorMessage": None,
        "pausedAtGate": None,
        "inputTokens": 0,
        "outputTokens": 0,
        "agentKey": None,
        "incarnation": None,
        # The trace of whoever asked for the run: every part of it joins that trace (tracing, #33).
        **tracing.context_fields(),
        **extra,
    }


async def enqueue(store: Store, run: Document) -> str:
    """Persist a run asked for (API, scheduler, retry); the actor starts it."""
    await store[RUNS].insert_one(run)
    return str(run["_id"])


async def claim(store: Store, run_id: str, incarnation: str, agent_key: str | None) -> Document | None:
    """queued -> running, stamped with the claiming incarnation; None when it is not queued
    (started already, cancelled, or unknown): a repeated start does nothing twice."""
    changes = {
        "status": "running",
        "startedAt": utcnow(),
        "incarnation": incarnation,
        **({"agentKey": agent_key} if agent_key else {}),
    }
    return await _transition(store, {"_id": run_id, "status": "queued"}, changes)


async def pause(
    store: Store, run_id: str, incarnation: str, state: dict[str, Any], tokens_in: int, tokens_out: int
) -> bool:
    """running -> paused at a gate, with the state to resume from (written through)."""
    done = await store[RUNS].update_one(
        {"_id": run_id, "status": "running", "incarnation": incarnation},
        {
            "$set": {
                "status": "paused",
                "pausedAtGate": state["gate"],
                "state": state,
                "pausedAt": utcnow(),
                "inputTokens": tokens_in,
                "outputTokens": tokens_out,
            }
        },
    )
    return done.modified_count == 1


async def resume(store: Store, run_id: str, incarnation: str, bypass_gates: bool) -> Document | None:
    """paused -> running under this incarnation; None when it is no longer paused."""
    changes = {
        "status": "running",
        "incarnation": incarnation,
        "pausedAtGate": None,
        "bypassGates": bypass_gates,
    }
    return await _transition(store, {"_id": run_id, "status": "paused"}, changes)


async def finish(
    store: Store,
    run_id: str,
    incarnation: str,
    status: str,
    tokens_in: int,
    tokens_out: int,
    error: str | None,
    agent_key: str | None = None,
    seen: Document | None = None,
    refused: bool | None = None,
) -> Document | None:
    """running -> completed/failed, only by the incarnation that runs it; the run, or None when
    another writer settled it first (recovery, the sweeper): then nothing more is recorded.

    `seen`: the run as this incarnation claimed it; the answer is then built from it and the
    changes, with no read (the fields a run record needs never change once it is queued).
    `refused`: the run never ran because its install was not ready (True) or gone (False); kept
    so a later command for the same run gets the same answer."""
    changes = {
        "status": status,
        "endedAt": utcnow(),
        "inputTokens": tokens_in,
        "outputTokens": tokens_out,
        "errorMessage": error,
        **({"agentKey": agent_key} if agent_key else {}),
        **({"refused": refused} if refused is not None else {}),
    }
    return await _transition(
        store, {"_id": run_id, "status": "running", "incarnation": incarnation}, changes, seen
    )


async def fail_queued(store: Store, run_id: str, message: str) -> Document | None:
    """queued -> failed (cancelled before it started, refused, or never handed over)."""
    changes = {"status": "failed", "errorMessage": message, "endedAt": utcnow()}
    return await _transition(store, {"_id": run_id, "status": "queued"}, changes)


async def settle(store: Store, run: Document, message: str) -> Document | None:
    """A claimed run whose incarnation is gone -> failed; conditional on the very status and
    incarnation that were seen, so a run that moved on meanwhile is left alone."""
    changes = {"status": "failed", "errorMessage": message, "endedAt": utcnow()}
    conditions = {"_id": run["_id"], "status": run["status"], "incarnation": run.get("incarnation")}
    return await _transition(store, conditions, changes, seen=run)


async def _transition(
    store: Store, conditions: Document, changes: Document, seen: Document | None = None
) -> Document | None:
    """One atomic conditional write from the expected state (`update_one`), then the run after it:
    `seen` with the changes, or read back by `_id`; None when the expected state did not hold.

    Not `find_one_and_update`: the embedded database answers it by reading the whole collection
    whatever the filter or index (160 ms at 20,000 runs, bench/ledger_cost.py), while an
    `update_one` and a read by `_id` cost about 2 ms each at any size. The write alone decides
    who won (the same atomic compare-and-set on MongoDB); the read back may already show a later
    change by another writer, which no caller relies on (they use fields fixed at enqueue)."""
    done = await store[RUNS].update_one(conditions, {"$set": changes})
    if done.matched_count != 1:
        return None
    if seen is not None:
        return {**seen, **changes}
    run = await store[RUNS].find_one({"_id": conditions["_id"]})
    return run if run is not None else {**conditions, **changes}


async def of_install(store: Store, install_id: str) -> list[Document]:
    """The install's runs that are not finished (recovery reads them once)."""
    return (
        await store[RUNS]
        .find({"installId": install_id, "status": {"$in": [*ACTIVE, "paused"]}})
        .sort("createdAt", 1)
        .to_list(None)
    )


# ---- incarnations --------------------------------------------------------------------------


async def take_over(store: Store, install_id: str, incarnation: str) -> None:
    """Make `incarnation` the copy of the install's actor that may act (its constructor)."""
    await store[INCARNATIONS].update_one(
        {"_id": install_id},
        {"$set": {"incarnation": incarnation, "since": utcnow(), "seenAt": utcnow(), "gone": False}},
        upsert=True,
    )


async def beat(store: Store, install_id: str, incarnation: str) -> bool:
    """Say this incarnation lives; False when a newer one took over (this copy must stop)."""
    done = await store[INCARNATIONS].update_one(
        {"_id": install_id, "incarnation": incarnation}, {"$set": {"seenAt": utcnow()}}
    )
    return done.matched_count == 1


async def leave(store: Store, install_id: str, incarnation: str) -> None:
    """An actor exiting cleanly says so, so the sweeper need not wait for its beat to age."""
    await store[INCARNATIONS].update_one(
        {"_id": install_id, "incarnation": incarnation}, {"$set": {"gone": True, "seenAt": utcnow()}}
    )


async def orphaned(store: Store, now: datetime, stale: timedelta, limit: int = 200) -> list[Document]:
    """Claimed runs whose actor is gone: their incarnation is not the install's current one,
    or the current one left or stopped beating `stale` ago (the sweeper settles them)."""
    running = await store[RUNS].find({"status": {"$in": ["starting", "running"]}}).to_list(limit)
    if not running:
        return []
    records = {
        doc["_id"]: doc
        for doc in await store[INCARNATIONS]
        .find({"_id": {"$in": list({r["installId"] for r in running})}})
        .to_list(None)
    }
    gone = []
    for run in running:
        record = records.get(run["installId"])
        if (
            record is None
            or record["incarnation"] != run.get("incarnation")
            or record.get("gone")
            or record["seenAt"].replace(tzinfo=now.tzinfo) < now - stale
        ):
            gone.append(run)
    return gone
