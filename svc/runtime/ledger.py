"""The run ledger: every write to a managed run (`pipeline_runs`), one function per transition.

Each transition is one conditional write from the expected state, so two writers can never
both win, and every write an install's actor makes to a run it has claimed names the actor's
incarnation: a copy of the actor that a newer one has superseded (an orphan left by a node
crash) matches nothing, so it can neither step, pause nor end a run (docs/runtime.md).

    queued --claim--> running --pause--> paused --resume--> running
       |               |  ^ step (one write per step)                |
       |               |  +--adopt (a new copy resumes the run)      |
       +--fail_queued--+--end / settle--> completed | failed <-------+
                                    paused --fail_queued (an eval run)--^

A run's document holds the run: its journal (every model and tool call, written before the run
acts on it: svc/runtime/journal.py), its events (what a watcher is told, `events` with `seq`), its
tokens, and, once it ends or pauses, the side effects it still owes (`owed`: the run record,
counters, steps, the callback, ...; svc/runtime/settlement.py clears each as it lands).

Who writes: the API and the scheduler insert queued runs and hand them to the install's actor
(`HandOver`, svc/runtime/handover.py, through `enqueue`; a synchronous caller waits for the end
there), and fail the ones they could never hand over (`fail_queued`); the job runner notes
hand-overs; the install's actor claims, steps, pauses, resumes and ends (and closes an eval run
its case left paused); the actor's recovery adopts (or settles) runs an earlier copy had
claimed, and the sweeper settles runs whose actor is gone or that stalled (both find them in
svc/runtime/neglected_runs.py). No other module writes `pipeline_runs`
(tests/test_architecture.py). A per-install incarnation record (`actor_incarnations`) names the
copy of the actor that may act.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from pymongo.errors import DuplicateKeyError

from plugins import tracing
from svc.core import Batch, Document, RunOutcome, Store, derived_id, new_id, utcnow

RUNS = "pipeline_runs"
INCARNATIONS = "actor_incarnations"  # svc/runtime/incarnations.py (read by `orphaned`)
ACTIVE = ("queued", "starting", "running")
SETTLED = ("completed", "failed")
Source = str  # run, webhook, schedule, continue, retry, heartbeat
# Journal and events are read back only by the run's detail, stream and resume; lists leave them out.
HEAVY = {"journal": 0, "events": 0}
Journal = list[Document] | None  # a step's new journal entries
# The hand-over failed: the API's 503 (actors/runtime.py), a queued run's end (HandOver, svc/jobs.py).
NOT_STARTED = "The install's worker could not be started"

log = logging.getLogger(__name__)


def new_run(install_id: str, task: str, source: Source, **extra: Any) -> Document:
    """A queued run's document."""
    return {
        "_id": new_id(),
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
        # Issue 34: the version it runs, the install's when it is queued (callers pass it); runs
        # already started finish on theirs and a paused one resumes on it (svc/installs/versions.py).
        "templateVersion": None,
        "seq": 0,
        "events": [],
        "journal": [],
        "resumes": 0,
        # The trace of whoever asked for the run: every part of it joins that trace (tracing, #33).
        **tracing.context_fields(),
        **extra,
    }


def event(kind: str, data: Document, at: datetime | None = None) -> Document:
    """One stored event: its type, its data and when (the watcher's view; `seq` is its position)."""
    return {"type": kind, "data": data, "at": at or utcnow()}


# ---- asking for runs (the API, the scheduler, the job runner) --------------------------------


async def enqueue(store: Store, run: Document) -> str:
    """Persist a run asked for (API, retry); the actor starts it."""
    await store[RUNS].insert_one(run)
    return str(run["_id"])


def enqueue_in(batch: Batch, runs: list[Document]) -> None:
    """Add queued runs to a batch (a scheduler tick's), each stored once: a tick sent again with the
    same run ids (svc/runtime/schedule_fires.py) leaves the runs it stored the first time as they are."""
    for run in runs:
        batch.put(RUNS, run)


async def retry(store: Store, first: Document, run: Document) -> tuple[Document, bool]:
    """Queue `run` as the retry of `first`, once: two retries at once give one new run. Answers
    the retry and whether this caller queued it (it then hands it over).

    The n-th retry of a run has an id fixed by (first run, n), so the insert itself decides: of
    callers that saw the same count, one inserts, and the others meet its run (already stored, so
    they answer with it). `retries` and `lastRetry` then catch up (idempotent); a count a crash
    left behind meets an ended retry, and the next n is tried."""
    n = int(first.get("retries") or 0) + 1
    while True:
        attempt = {**run, "_id": derived_id(first["_id"], "retry", n)}
        try:
            await enqueue(store, attempt)
            won = True
        except DuplicateKeyError:
            won = False
        # "No count yet, or a lower one" without a top-level `$or`: the embedded server answers
        # a filter with one by reading every run; this one rides the `_id`.
        await store[RUNS].update_one(
            {"_id": first["_id"], "retries": {"$not": {"$gte": n}}},
            {"$set": {"retries": n, "lastRetry": attempt["_id"]}},
        )
        if won:
            return attempt, True
        existing = await store[RUNS].find_one({"_id": attempt["_id"]}, HEAVY)
        if existing is not None and existing["status"] in (*ACTIVE, "paused"):
            return existing, False
        n += 1


async def note_handoff(store: Store, run: Document, now: datetime) -> bool:
    """The job runner hands a queued run over again: claimed by moving `handoffAt` from the value
    it saw, so one job runner does it."""
    taken = await store[RUNS].update_one(
        {"_id": run["_id"], "status": "queued", "handoffAt": run["handoffAt"]},
        {"$set": {"handoffAt": now}, "$inc": {"handoffs": 1}},
    )
    return taken.modified_count == 1


async def release(store: Store, run_id: str, now: datetime) -> bool:
    """A scheduled run that waited for its install to be free is now handed over (one scheduler)."""
    done = await store[RUNS].update_one(
        {"_id": run_id, "status": "queued", "handoffAt": None}, {"$set": {"handoffAt": now}}
    )
    return done.modified_count == 1


async def fail_queued(
    store: Store,
    run_id: str,
    message: str,
    owed: list[str],
    events: list[Document] | None = None,
    fields: Document | None = None,
    waiting: tuple[str, ...] = ("queued",),
) -> Document | None:
    """queued -> failed (cancelled before it started, refused, or never handed over), with what it
    owes; the run after the change, or None when it was not queued. `waiting` ("queued",
    "paused"): a paused run too (an eval run closed at its gate)."""
    now = utcnow()
    changes = {
        "status": "failed",
        "errorMessage": message,
        "endedAt": now,
        "owed": owed,
        "owedAt": now,
        **(fields or {}),
    }
    done = await store[RUNS].update_one(
        {"_id": run_id, "status": {"$in": list(waiting)}}, _with_events({"$set": changes}, events or [])
    )
    if done.matched_count != 1:
        return None
    return await store[RUNS].find_one({"_id": run_id}, HEAVY)


# ---- the install's actor ---------------------------------------------------------------------


async def claim(store: Store, run_id: str, incarnation: str, events: list[Document]) -> bool:
    """queued -> running, stamped with the claiming incarnation, with the run's first events; False
    when it is not queued (started already, cancelled, or unknown): a repeated start does nothing
    twice. No read back: the actor has the run as it was queued (`StartRun`)."""
    now = utcnow()
    change = {"$set": {"status": "running", "startedAt": now, "stepAt": now, "incarnation": incarnation}}
    done = await store[RUNS].update_one({"_id": run_id, "status": "queued"}, _with_events(change, events))
    return done.matched_count == 1


async def step(
    store: Store,
    run_id: str,
    incarnation: str,
    *,
    journal: list[Document],
    events: list[Document],
    tokens_in: int = 0,
    tokens_out: int = 0,
) -> bool:
    """One step of a running run, in one write: its journal entries, its events and its tokens.
    False when this incarnation no longer runs it (superseded, cancelled or settled elsewhere)."""
    change: Document = {"$set": {"stepAt": utcnow()}}
    if tokens_in or tokens_out:
        change["$inc"] = {"inputTokens": tokens_in, "outputTokens": tokens_out}
    return await _fenced(store, run_id, incarnation, change, journal, events)


async def pause(
    store: Store,
    run_id: str,
    incarnation: str,
    *,
    gate: str,
    state: Document,
    journal: list[Document],
    events: list[Document],
    tokens_in: int,
    tokens_out: int,
    owed: list[str],
) -> bool:
    """running -> paused at a gate, with the state to resume from and what the pause owes."""
    change: Document = {
        "$set": {
            "status": "paused",
            "pausedAtGate": gate,
            "state": state,
            "pausedAt": utcnow(),
            "owed": owed,
            "owedAt": utcnow(),
        },
        "$inc": {"inputTokens": tokens_in, "outputTokens": tokens_out},
    }
    return await _fenced(store, run_id, incarnation, change, journal, events)


async def _fenced(
    store: Store, run_id: str, incarnation: str, change: Document, journal: Journal, events: list[Document]
) -> bool:
    """One write to a run this incarnation runs, with journal and events; False if it moved."""
    if journal:
        change["$push"] = {"journal": {"$each": journal}}
    done = await store[RUNS].update_one(
        {"_id": run_id, "status": "running", "incarnation": incarnation}, _with_events(change, events)
    )
    return done.matched_count == 1


async def resume(
    store: Store,
    run_id: str,
    incarnation: str,
    bypass_gates: bool,
    events: list[Document],
    journal: list[Document] | None = None,
) -> Document | None:
    """paused -> running under this incarnation, with how the gate was decided (`journal`); the
    run (journal and all), or None when it is no longer paused."""
    now = utcnow()
    change: Document = {
        "$set": {
            "status": "running",
            "incarnation": incarnation,
            "pausedAtGate": None,
            "bypassGates": bypass_gates,
            "stepAt": now,
        }
    }
    if journal:
        change["$push"] = {"journal": {"$each": journal}}
    done = await store[RUNS].update_one({"_id": run_id, "status": "paused"}, _with_events(change, events))
    if done.matched_count != 1:
        return None
    return await store[RUNS].find_one({"_id": run_id})


async def end(
    store: Store,
    run_id: str,
    incarnation: str,
    *,
    status: str,
    fields: Document,
    journal: list[Document],
    events: list[Document],
    tokens_in: int,
    tokens_out: int,
    owed: list[str],
) -> bool:
    """running -> completed/failed, only by the incarnation that runs it, in ONE write: the status,
    what the end decided (`fields`: response, error, agent, duration, tokens by agent), the last
    step's journal, events and tokens, and the side effects still owed. False when another writer
    settled the run first (recovery, the sweeper): then nothing more is recorded."""
    change: Document = {
        "$set": {"status": status, "endedAt": utcnow(), "owed": owed, "owedAt": utcnow(), **fields},
        "$inc": {"inputTokens": tokens_in, "outputTokens": tokens_out},
    }
    return await _fenced(store, run_id, incarnation, change, journal, events)


async def settle(
    store: Store, run: Document, message: str, owed: list[str], events: list[Document], fields: Document
) -> bool:
    """A claimed run whose actor is gone (or that stalled) -> failed, with what it owes;
    conditional on the very status, incarnation and last step that were seen, so a run that moved
    on meanwhile is left alone. Its tokens stay what its steps recorded."""
    now = utcnow()
    changes = {
        "status": "failed",
        "errorMessage": message,
        "endedAt": now,
        "owed": owed,
        "owedAt": now,
        **fields,
    }
    conditions = {
        "_id": run["_id"],
        "status": run["status"],
        "incarnation": run.get("incarnation"),
        "stepAt": run.get("stepAt"),
    }
    done = await store[RUNS].update_one(conditions, _with_events({"$set": changes}, events))
    return done.matched_count == 1


async def adopt(store: Store, run: Document, incarnation: str, events: list[Document]) -> bool:
    """A new copy of the install's actor takes over a run an earlier copy was running (it resumes
    it from its journal): conditional on the incarnation seen, counted in `resumes`."""
    change = {"$set": {"incarnation": incarnation, "stepAt": utcnow()}, "$inc": {"resumes": 1}}
    done = await store[RUNS].update_one(
        {"_id": run["_id"], "status": "running", "incarnation": run.get("incarnation")},
        _with_events(change, events),
    )
    return done.matched_count == 1


def paid(batch: Batch, run_id: str, names: list[str], steps_settled: int) -> None:
    """Side effects that landed (the last operation of the settlement's batch): no longer owed,
    and the journal's steps up to `steps_settled` stored for their other readers."""
    change = {"$pull": {"owed": {"$in": names}}, "$set": {"stepsSettled": steps_settled}}
    batch.update(RUNS, {"_id": run_id}, change)


async def paid_now(store: Store, run_id: str, names: list[str]) -> None:
    """Side effects paid after the batch (a schedule's pause check)."""
    await store[RUNS].update_one({"_id": run_id}, {"$pull": {"owed": {"$in": names}}})


# ---- reading --------------------------------------------------------------------------------


async def get(store: Store, run_id: str, heavy: bool = False) -> Document | None:
    """One run (without its journal and events unless `heavy`)."""
    return await store[RUNS].find_one({"_id": run_id}, None if heavy else HEAVY)


async def newest_active(store: Store, install_id: str) -> Document | None:
    """The install's newest run that is queued or running (cancel-run's target)."""
    return await store[RUNS].find_one(
        {"installId": install_id, "status": {"$in": list(ACTIVE)}}, HEAVY, sort=[("createdAt", -1)]
    )


async def paused_at(store: Store, install_id: str, gate: str) -> Document | None:
    """The install's run paused at `gate`, if any."""
    for run in await _paused(store, install_id):
        if run.get("pausedAtGate") == gate:
            return run
    return None


async def paused_on_approval(store: Store, install_id: str, approval_id: str) -> Document | None:
    """The install's run paused at the tool call an approval request is for."""
    for run in await _paused(store, install_id):
        if ((run.get("state") or {}).get("call") or {}).get("approvalId") == approval_id:
            return run
    return None


async def _paused(store: Store, install_id: str) -> list[Document]:
    """The install's paused runs, by the (installId, status) index alone: with a third field in
    the filter the embedded server's planner took the (installId, createdAt) index and read every
    run the install ever made (docs/consistency.md)."""
    return await store[RUNS].find({"installId": install_id, "status": "paused"}, HEAVY).to_list(None)


async def standing(store: Store, run_id: str) -> RunOutcome:
    """Where a run stands, as a waiting caller is answered."""
    run = await get(store, run_id)
    if run is None:
        return RunOutcome(run_id, "failed", errorMessage="Run not found")
    return outcome(run)


async def paid_up(store: Store, run_id: str) -> bool:
    """Whether the run owes nothing (its record, counters and callback stored)."""
    return not await store[RUNS].count_documents({"_id": run_id, "owed.0": {"$exists": True}}, limit=1)


def _with_events(change: Document, events: list[Document]) -> Document:
    """`change` that also appends `events` and counts them in `seq` (their positions)."""
    if not events:
        return change
    out = dict(change)
    out["$push"] = {**change.get("$push", {}), "events": {"$each": events}}
    out["$inc"] = {**change.get("$inc", {}), "seq": len(events)}
    return out


def outcome(run: Document) -> RunOutcome:
    """The answer a run's document gives."""
    return RunOutcome(
        runId=run["_id"],
        status=run["status"],
        response=run.get("response"),
        agent=run.get("agentKey"),
        inputTokens=int(run.get("inputTokens") or 0),
        outputTokens=int(run.get("outputTokens") or 0),
        errorMessage=run.get("errorMessage"),
        pausedAtGate=run.get("pausedAtGate") if run["status"] == "paused" else None,
        refused=run.get("refused"),
    )
