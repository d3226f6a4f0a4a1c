"""The newest records of one owner, read in time windows that each match few documents.

On the embedded store a query costs in proportion to the documents its filter
matches, whatever its index, sort or limit: `find({installId}).sort(newest).limit(100)`
over an install with 20,000 events decodes all 20,000 (about 600 ms). A filter that
also bounds `createdAt` to a window matches only that window's documents (an index
range), so the newest `count` records are read window by window, newest first:
the first window is short, each next one `GROWTH` times longer and just before the
previous one (the windows never overlap, so every record is read at most once),
until `count` records are found or the windows reach `floor` (the owner's creation,
the log's retention, the caller's `from`).

What a read costs then depends on `count`, not on the number of records or how
recent they are: the windows before the last hold fewer than `count` records, and
the last one, `GROWTH` times longer than all before it together, holds about
`GROWTH` times as many at an even rate. An empty window costs one round trip (about
0.5 ms of database time). The span the newest `count` took is remembered per owner
in this process (bounded), so the next read of the same owner starts with a window
a quarter longer than that and usually takes one window. The answer is the same as the unbounded query's:
windows are disjoint, each is sorted newest first (`createdAt`, then `_id`), and
they are concatenated in order.
"""

from __future__ import annotations

from collections import OrderedDict
from datetime import datetime, timedelta
from typing import Any

from pymongo import DESCENDING

from svc.core.clock import aware, utcnow
from svc.core.store import Document

FIRST_SPAN = timedelta(seconds=2)
GROWTH = 4
# The first window of the next read: the span the last one needed, plus this share.
MARGIN = 1.25
# Without a floor the windows stop growing at this span and the last one is open below.
MAX_SPAN = timedelta(days=3660)
REMEMBERED = 10_000
# Between the clocks that stamped an owner (an install) and its first records.
CLOCK_SLACK = timedelta(minutes=1)
ORDER = [("createdAt", DESCENDING), ("_id", DESCENDING)]

_spans: OrderedDict[tuple[str, str], timedelta] = OrderedDict()


def floor_of(owner: Document) -> datetime | None:
    """No record of `owner` (an install) is older than this: where its newest-first reads stop
    (its `createdAt`, less the clocks' slack); None when it has no creation time."""
    created = owner.get("createdAt")
    return aware(created) - CLOCK_SLACK if created is not None else None


def _first_span(key: tuple[str, str]) -> timedelta:
    span = _spans.get(key)
    if span is None:
        return FIRST_SPAN
    _spans.move_to_end(key)
    return max(FIRST_SPAN, span * MARGIN)


def _remember(key: tuple[str, str], span: timedelta) -> None:
    _spans[key] = span
    _spans.move_to_end(key)
    while len(_spans) > REMEMBERED:
        _spans.popitem(last=False)


async def newest(
    collection: Any,
    match: Document,
    count: int,
    *,
    floor: datetime | None = None,
    ceiling: datetime | None = None,
    projection: Document | None = None,
    key: str | None = None,
) -> list[Document]:
    """The newest `count` documents matching `match` with `floor <= createdAt <= ceiling`, newest first.

    `collection` is a PyMongo async collection whose index starts with the fields of
    `match` followed by `createdAt`. `key` names the owner for the remembered span
    (default: `match` itself).
    """
    if count <= 0:
        return []
    memo = (collection.name, key or repr(sorted(match.items())))
    anchor = aware(ceiling) if ceiling is not None else utcnow()
    low_limit = aware(floor) if floor is not None else None
    span = _first_span(memo)
    found: list[Document] = []
    high: datetime | None = None  # the previous window's start (exclusive top of this one)
    while True:
        low: datetime | None = (high or anchor) - span
        last = False
        if low_limit is not None and low is not None and low <= low_limit:
            low, last = low_limit, True
        elif low_limit is None and span >= MAX_SPAN:
            low, last = None, True
        window: Document = {}
        if low is not None:
            window["$gte"] = low
        if high is not None:
            window["$lt"] = high
        elif ceiling is not None:
            window["$lte"] = anchor  # the first window includes the ceiling; open above without one
        query = {**match, "createdAt": window} if window else dict(match)
        found += await collection.find(query, projection).sort(ORDER).to_list(count - len(found))
        if len(found) >= count or last or low is None:
            break
        high = low
        span *= GROWTH
    if len(found) >= count:
        # The span the `count` newest actually took (not the windows' overshoot, which
        # would compound from read to read).
        _remember(memo, anchor - aware(found[count - 1]["createdAt"]))
    elif low is not None:
        _remember(memo, anchor - low)  # fewer than `count` in all: start wide next time
    return found[:count]
