"""Each template's newest runs, in one bounded document kept on the write path.

GET /api/runs lists a template's newest runs (up to 500). A `find` sorted by time
costs, on the embedded store, in proportion to every run its filter matches, so the
list is kept instead in one document per template, `runs_newest` id `latest|<templateId>`,
updated with the MongoDB subset pattern: `$push` with `$each`, `$sort` and `$slice`,
so it never holds more than `KEPT` runs and a late report lands in its place.

Two things keep that update cheap on a server that decodes and re-encodes the whole
document on every write:

- an item is one string, a JSON array whose first element is the run's time in a fixed
  width (`2026-01-02T03:04:05.678901Z`) and whose second is its id, so `$sort: -1` on
  plain strings orders newest first (ties by id) without comparing sub-documents;
- it lives in its own collection: the embedded server holds a per-collection lock for
  the whole of an update, commit included, so beside the counters (`run_stats`) it
  would serialise with every counter upsert;
- concurrent reports for one template in one process share one update (group commit):
  each adds its item to the template's queue and waits for the lock; the holder pushes
  everything queued so far. A report answers only after its own item is stored.

Reading is one `find_one` of that document: its cost depends on `limit`, never on how
many runs there are or how recent they are.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from svc.core import Batch, Document, Store, aware

COLLECTION = "runs_newest"
COUNTERS = "run_stats"
KEPT = 500  # GET /api/runs' largest limit
FIELDS = ("id", "installId", "platform", "agentKey", "status", "inputTokens", "outputTokens", "errorMessage")
STAMP = "%Y-%m-%dT%H:%M:%S.%fZ"


def record_id(template_id: str) -> str:
    """The id of a template's newest-runs document."""
    return f"latest|{template_id}"


def item(run: Document) -> str:
    """A run as the newest-runs document keeps it: time first, so strings sort by time."""
    stamp = aware(run["createdAt"]).astimezone(UTC).strftime(STAMP)
    values = [run["_id"], *(run.get(name) for name in FIELDS[1:])]
    return json.dumps([stamp, *values], separators=(",", ":"))


def parse(value: str) -> dict[str, Any]:
    """An item back as the run list's fields (`createdAt` a datetime)."""
    stamp, *values = json.loads(value)
    return {
        **dict(zip(FIELDS, values, strict=True)),
        "createdAt": datetime.strptime(stamp, STAMP).replace(tzinfo=UTC),
    }


def _push(template_id: str, items: list[str]) -> tuple[Document, Document]:
    return (
        {"_id": record_id(template_id)},
        {
            "$push": {"runs": {"$each": items, "$sort": -1, "$slice": KEPT}},
            "$setOnInsert": {"kind": "latest", "templateId": template_id},
        },
    )


@dataclass
class _Queue:
    """One template's items waiting to be pushed, in this process."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    pending: list[str] = field(default_factory=list)
    enqueued: int = 0
    stored: int = 0


_queues: weakref.WeakKeyDictionary[Store, dict[str, _Queue]] = weakref.WeakKeyDictionary()


def push_once(batch: Batch, run: Document) -> None:
    """Add a managed run to its template's newest runs as operations of `batch`; sending the
    batch again adds nothing (the push is guarded by the run's own item)."""
    query, change = _push(run["templateId"], [item(run)])
    guard = {"runs": {"$ne": item(run)}}
    batch.once(COLLECTION, query, guard, {"$push": change["$push"]}, change["$setOnInsert"])


async def keep(store: Store, run: Document) -> None:
    """Add a new run to its template's newest runs; returns once it is stored."""
    await keep_all(store, run["templateId"], [run])


async def keep_all(store: Store, template_id: str, runs: list[Document]) -> None:
    """Add new runs of one template to its newest runs; returns once they are stored."""
    queues = _queues.setdefault(store, {})
    queue = queues.setdefault(template_id, _Queue())
    queue.pending += [item(run) for run in runs]
    queue.enqueued += 1
    ticket = queue.enqueued
    async with queue.lock:
        if queue.stored >= ticket:
            return  # an earlier holder pushed ours with its own
        items, upto, queue.pending = queue.pending, queue.enqueued, []
        try:
            await store[COLLECTION].update_one(*_push(template_id, items), upsert=True)
        except BaseException:
            queue.pending[:0] = items  # the next holder tries them again
            raise
        queue.stored = upto
        if not queue.pending and queue.stored == queue.enqueued:
            queues.pop(template_id, None)  # nothing waits: no state kept per template


async def rebuild(store: Store, template_id: str) -> None:
    """Recompute a template's newest-runs document from its run records (rebuild, start-up)."""
    runs = (
        await store["runs"]
        .find({"templateId": template_id})
        .sort([("createdAt", -1), ("_id", -1)])
        .limit(KEPT)
        .to_list(None)
    )
    await store[COLLECTION].replace_one(
        {"_id": record_id(template_id)},
        {"kind": "latest", "templateId": template_id, "runs": sorted((item(r) for r in runs), reverse=True)},
        upsert=True,
    )


async def backfill(store: Store) -> int:
    """Build the newest-runs document of templates whose runs predate it; how many were built.

    Start-up, before the API takes requests: it reads the all-time run counters and, once
    per such template, its newest runs.
    """
    with_runs = set(await store[COUNTERS].distinct("templateId", {"kind": "total"}))
    with_record = set(await store[COLLECTION].distinct("templateId"))
    for template_id in sorted(with_runs - with_record):
        await rebuild(store, template_id)
    return len(with_runs - with_record)


async def latest(store: Store, template_id: str, limit: int) -> list[dict[str, Any]]:
    """A template's newest `limit` runs, newest first."""
    doc = await store[COLLECTION].find_one({"_id": record_id(template_id)}, {"runs": {"$slice": limit}})
    return [parse(value) for value in ((doc or {}).get("runs") or [])[:limit]]
