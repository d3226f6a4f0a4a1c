"""Operational counters kept in MongoDB, so events counted in Ray actors reach `GET /metrics`.

Runs finish, judges decide and mail fails inside install actors and the scheduler
actor, in other processes than the API that is scraped. Each such event adds to
one document of `metric_counters` (`$inc`, upserted), keyed by metric name and
labels; a histogram is one document per label set holding its bucket counts, sum
and count. A scrape reads the whole collection: one query whose size is the
number of label sets (platforms times statuses, providers, ...), never the number of
events. The values are cluster-wide totals (docs/operations.md). The changes one
operation makes (a model call's two token counters, a run record's counter and duration)
go in one bulk write; an install's actor holds them (`Buffered`) and writes what a second
gathered as one update per label set, so a run pays no round trip for its metrics.

Counting never fails the operation it counts: a failed write is logged and dropped.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from pymongo import UpdateOne
from pymongo.errors import BulkWriteError, PyMongoError

from svc.core.bulk import DUPLICATE_KEY
from svc.core.store import Document, Store

log = logging.getLogger(__name__)

COLLECTION = "metric_counters"
# A scrape reads at most this many label sets; more means a label took unbounded values.
READ_LIMIT = 5000
# Seconds: runs take seconds to minutes; scheduler lag is well under a tick when healthy.
DURATION_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
LAG_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)


def _key(name: str, labels: Mapping[str, str]) -> str:
    return name + "|" + "|".join(f"{k}={v}" for k, v in sorted(labels.items()))


Change = tuple[str, dict[str, str], Document]
"""One counter write: the metric's name, its labels and the update of its document."""


def increment(name: str, labels: Mapping[str, str], amount: float = 1) -> Change | None:
    """Adding `amount` to a counter (nothing to write when it is 0)."""
    return (name, dict(labels), {"$inc": {"value": amount}}) if amount else None


def observation(
    name: str, labels: Mapping[str, str], values: Iterable[float], buckets: tuple[float, ...]
) -> Change | None:
    """Adding observations to a histogram (nothing to write without any)."""
    increments: dict[str, float] = {}
    count = 0
    total = 0.0
    for value in values:
        index = bisect.bisect_left(buckets, value)  # first bucket whose bound is >= value
        field = f"buckets.{index}"
        increments[field] = increments.get(field, 0) + 1
        count += 1
        total += value
    if not count:
        return None
    increments.update({"count": count, "sum": total})
    return (name, dict(labels), {"$inc": increments, "$set": {"bounds": list(buckets)}})


async def write(store: Store, changes: Iterable[Change | None]) -> None:
    """Apply counter changes in one round trip (an unordered bulk of upserts).

    A first insert that raced another process's is retried as a plain update. Counting never
    fails the operation it counts: a failed write is logged and dropped."""
    writes = [
        ({"_id": _key(name, labels)}, update, {"$setOnInsert": {"name": name, "labels": labels}})
        for name, labels, update in filter(None, changes)
    ]
    if not writes:
        return
    collection = store[COLLECTION]
    try:
        try:
            await collection.bulk_write(
                [UpdateOne(key, {**update, **setter}, upsert=True) for key, update, setter in writes],
                ordered=False,
            )
        except BulkWriteError as exc:
            errors = exc.details.get("writeErrors", [])
            if any(error.get("code") != DUPLICATE_KEY for error in errors):
                raise
            raced = [writes[error["index"]] for error in errors]
            await collection.bulk_write([UpdateOne(key, update) for key, update, _ in raced], ordered=False)
    except PyMongoError as exc:
        names = sorted({key["_id"].split("|", 1)[0] for key, _, _ in writes})
        log.warning("metric counters %s not updated: %s", names, type(exc).__name__)


class Buffered:
    """Counter changes held in memory and written together, at most once every `every_s`: an
    install's actor counts each model call's tokens this way, so a run pays no round trip for its
    metrics (what billing reads is never counted here). What a crash loses is at most one
    interval of operational counts."""

    def __init__(self, store: Store, every_s: float = 1.0) -> None:
        self.store = store
        self.every_s = every_s
        self._held: list[Change] = []
        self._flusher: asyncio.Task[None] | None = None

    async def __call__(self, changes: Iterable[Change | None]) -> None:
        """Hold the changes; a flusher writes them within `every_s`."""
        self._held.extend(filter(None, changes))
        if self._held and (self._flusher is None or self._flusher.done()):
            self._flusher = asyncio.get_running_loop().create_task(self._later())

    async def _later(self) -> None:
        await asyncio.sleep(self.every_s)
        await self.flush()

    async def flush(self) -> None:
        """Write what is held now (one round trip, one update per label set)."""
        held, self._held = self._held, []
        await write(self.store, merged(held))


def merged(changes: Iterable[Change]) -> list[Change]:
    """Changes to the same label set as one (increments summed, the last `$set` kept): a burst of
    runs held together costs one update per counter, not one per run."""
    out: dict[str, Change] = {}
    for name, labels, update in changes:
        key = _key(name, labels)
        if key not in out:
            out[key] = (name, labels, {op: dict(fields) for op, fields in update.items()})
            continue
        into = out[key][2]
        for field, amount in update.get("$inc", {}).items():
            increments = into.setdefault("$inc", {})
            increments[field] = increments.get(field, 0) + amount
        if "$set" in update:
            into.setdefault("$set", {}).update(update["$set"])
    return list(out.values())


async def inc(store: Store, name: str, labels: Mapping[str, str], amount: float = 1) -> None:
    """Add `amount` to a counter."""
    await write(store, [increment(name, labels, amount)])


async def observe(
    store: Store, name: str, labels: Mapping[str, str], values: Iterable[float], buckets: tuple[float, ...]
) -> None:
    """Add observations to a histogram (one write for all of them)."""
    await write(store, [observation(name, labels, values, buckets)])


async def read_all(store: Store) -> list[dict[str, Any]]:
    """Every counter and histogram document (bounded by READ_LIMIT)."""
    return await store[COLLECTION].find({}).to_list(READ_LIMIT)
