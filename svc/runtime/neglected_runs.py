"""The runs somebody must look after, read from `pipeline_runs` (every write stays in the ledger,
svc/runtime/ledger.py): for the job runner's sweep (svc/jobs.py), claimed runs whose actor is
gone, runs that stalled, runs that still owe side effects and queued runs not taken since their
hand-over, each bounded and oldest first; for an install's actor starting up (svc/runtime/host.py),
its install's unfinished runs, the ones its own incarnation still runs, the ones that owe.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from svc.core import Document, Store, aware
from svc.runtime.ledger import ACTIVE, HEAVY, INCARNATIONS, RUNS


async def orphaned(store: Store, now: datetime, stale: timedelta, limit: int = 200) -> list[Document]:
    """Claimed runs whose actor is gone, oldest first: their incarnation is not the install's
    current one, or the current one left or stopped beating `stale` ago."""
    running = (
        await store[RUNS]
        .find({"status": {"$in": ["starting", "running"]}}, HEAVY)
        .sort("startedAt", 1)
        .limit(limit)
        .to_list(None)
    )
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


async def stalled(store: Store, before: datetime, limit: int = 200) -> list[Document]:
    """Running runs with no step since `before`, oldest first: a run whose actor lives but could not
    end it (its abort failed while the database was away), or one stuck in a call that never
    returns. The sweeper settles them whatever their actor."""
    return (
        await store[RUNS]
        .find({"status": "running", "stepAt": {"$lt": before}}, HEAVY)
        .sort("stepAt", 1)
        .limit(limit)
        .to_list(None)
    )


async def owing(store: Store, names: tuple[str, ...], before: datetime, limit: int) -> list[Document]:
    """Ended or paused runs that have owed side effects since before `before`, oldest first (the
    sweeper finishes them once their actor had its chance). The filter is the multikey index on
    `owed` alone, so it matches only the few runs that owe anything (a run's settlement follows
    its end within milliseconds); their age is checked here. With another field beside it the
    embedded server read every run ever made, heavy, each time (227 ms at 5,000 runs, every 2 s)."""
    docs = await store[RUNS].find({"owed": {"$in": list(names)}}, HEAVY).to_list(None)
    due = sorted((doc for doc in docs if _owed_at(doc) < before), key=_owed_at)
    return due[:limit]


def _owed_at(run: Document) -> datetime:
    """Since when the run owes (a run without the stamp owes since forever)."""
    at = run.get("owedAt")
    return aware(at) if at is not None else datetime.min.replace(tzinfo=UTC)


async def waiting(store: Store, handed_before: datetime, limit: int) -> list[Document]:
    """Queued runs handed over before `handed_before` and not taken yet, oldest hand-over first."""
    return (
        await store[RUNS]
        .find({"status": "queued", "handoffAt": {"$ne": None, "$lte": handed_before}}, HEAVY)
        .sort("handoffAt", 1)
        .to_list(limit)
    )


async def of_install(store: Store, install_id: str) -> list[Document]:
    """The install's runs that are not finished, journal and all (an actor's recovery)."""
    return (
        await store[RUNS]
        .find({"installId": install_id, "status": {"$in": [*ACTIVE, "paused"]}})
        .sort("createdAt", 1)
        .to_list(None)
    )


async def running_of(store: Store, install_id: str, incarnation: str) -> list[Document]:
    """The install's runs this incarnation claimed that are still running (journal and all; every
    beat of its actor). Filtered on the (installId, status) index alone, the incarnation checked
    here: with a third field the embedded server's planner took the (installId, createdAt) index
    and read every run the install ever made, journal and all (17 ms at 500 runs)."""
    running = await store[RUNS].find({"installId": install_id, "status": "running"}).to_list(None)
    return [run for run in running if run.get("incarnation") == incarnation]


async def owing_of(store: Store, install_id: str, names: tuple[str, ...]) -> list[str]:
    """The ids of an install's runs that still owe side effects (its actor pays them): the owing
    runs by the `owed` index, this install's picked here (see `owing`)."""
    docs = await store[RUNS].find({"owed": {"$in": list(names)}}, {"_id": 1, "installId": 1}).to_list(None)
    return [doc["_id"] for doc in docs if doc["installId"] == install_id][:200]
