"""Operational counters kept in MongoDB, so events counted in Ray actors reach `GET /metrics`.

Runs finish, judges decide and mail fails inside install actors and the scheduler
actor, in other processes than the API that is scraped. Each such event adds to
one document of `metric_counters` (`$inc`, upserted), keyed by metric name and
labels; a histogram is one document per label set holding its bucket counts, sum
and count. A scrape reads the whole collection: one query whose size is the
number of label sets (platforms times statuses, providers, ...), never the number of
events. The values are cluster-wide totals (docs/operations.md).

Counting never fails the operation it counts: a failed write is logged and dropped.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from pymongo.errors import DuplicateKeyError, PyMongoError

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


async def _upsert(store: Store, name: str, labels: Mapping[str, str], update: Document) -> None:
    """One `$inc` on the label set's document; a racing first insert is retried as an update."""
    key = _key(name, labels)
    setter = {"$setOnInsert": {"name": name, "labels": dict(labels)}}
    try:
        try:
            await store[COLLECTION].update_one({"_id": key}, {**update, **setter}, upsert=True)
        except DuplicateKeyError:
            await store[COLLECTION].update_one({"_id": key}, update)
    except PyMongoError as exc:
        log.warning("metric counter %s not updated: %s", name, type(exc).__name__)


async def inc(store: Store, name: str, labels: Mapping[str, str], amount: float = 1) -> None:
    """Add `amount` to a counter."""
    if amount:
        await _upsert(store, name, labels, {"$inc": {"value": amount}})


async def observe(
    store: Store, name: str, labels: Mapping[str, str], values: Iterable[float], buckets: tuple[float, ...]
) -> None:
    """Add observations to a histogram (one write for all of them)."""
    increments: dict[str, float] = {}
    count = 0
    total = 0.0
    for value in values:
        index = bisect.bisect_left(buckets, value)  # first bucket whose bound is >= value
        field = f"buckets.{index}"
        increments[field] = increments.get(field, 0) + 1
        count += 1
        total += value
    if count:
        increments.update({"count": count, "sum": total})
        await _upsert(store, name, {**labels}, {"$inc": increments, "$set": {"bounds": list(buckets)}})


async def read_all(store: Store) -> list[dict[str, Any]]:
    """Every counter and histogram document (bounded by READ_LIMIT)."""
    return await store[COLLECTION].find({}).to_list(READ_LIMIT)
