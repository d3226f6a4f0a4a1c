"""Completed and failed steps per UTC day (GET /api/installs/:id/run-log), counted incrementally.

Counting an install's step events of the last 30 days matches every one of them, and
on the embedded store a query costs in proportion to the documents it matches. But
events are only ever appended, with `createdAt` the time they were written, so once
an instant is `SETTLE` in the past nothing more arrives before it. Each API process
therefore keeps, per install, the counts of its settled events (a tally up to some
instant) and on the next request reads only the events after that instant: the
settled ones since the last request (then added to the tally) and the last
`SETTLE` (read every time, never kept). A request costs the events written since
the previous one plus `SETTLE` worth, not the install's history. The first request
in a process, or one reaching further back than the tally, counts from the window's
start once.

Two requests at once each compute from the same tally; only the one whose tally is
still current stores its result (the other's answer is just as right), so nothing is
counted twice. The tally holds at most 30 days per install and `REMEMBERED` installs.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from svc.core import Store

SETTLE = timedelta(seconds=10)
REMEMBERED = 5_000
STEP_TYPES = ("step_completed", "step_failed")


@dataclass(frozen=True)
class Tally:
    """Step counts per day of one install's events in [start, upto)."""

    start: datetime
    upto: datetime
    days: dict[date, tuple[int, int]]


_tallies: OrderedDict[str, Tally] = OrderedDict()


async def _count(
    store: Store, install_id: str, low: datetime, high: datetime | None
) -> dict[date, tuple[int, int]]:
    window: dict[str, Any] = {"$gte": low}
    if high is not None:
        window["$lt"] = high
    counts: dict[date, tuple[int, int]] = {}
    # Only the index's fields (installId, createdAt) in the filter: the embedded server uses
    # an index only when it covers every field of the filter, and scans the whole
    # collection otherwise. The other event types of the window are skipped here.
    cursor = store["pipeline_events"].find(
        {"installId": install_id, "createdAt": window}, {"eventType": 1, "createdAt": 1}
    )
    async for doc in cursor:
        if doc["eventType"] not in STEP_TYPES:
            continue
        day = doc["createdAt"].astimezone(UTC).date()
        ok, error = counts.get(day, (0, 0))
        counts[day] = (ok + 1, error) if doc["eventType"] == "step_completed" else (ok, error + 1)
    return counts


def _merge(*parts: dict[date, tuple[int, int]]) -> dict[date, tuple[int, int]]:
    out: dict[date, tuple[int, int]] = {}
    for part in parts:
        for day, (ok, error) in part.items():
            was_ok, was_error = out.get(day, (0, 0))
            out[day] = (was_ok + ok, was_error + error)
    return out


async def per_day(
    store: Store, install_id: str, start: datetime, now: datetime
) -> dict[date, tuple[int, int]]:
    """(ok, error) per UTC day of the install's step events since `start` (a day's start), up to now."""
    settled = now - SETTLE
    previous = _tallies.get(install_id)
    if previous is None or previous.start > start or previous.upto > settled:
        base = Tally(start, start, {})  # count from the window's start once
    else:
        base = previous
    fresh = await _count(store, install_id, base.upto, settled) if settled > base.upto else {}
    keep_from = (settled - timedelta(days=31)).date()
    counted = {d: v for d, v in _merge(base.days, fresh).items() if d >= keep_from}
    updated = Tally(base.start, max(base.upto, settled), counted)
    if _tallies.get(install_id) is previous:  # nobody stored a newer tally meanwhile
        _tallies[install_id] = updated
        _tallies.move_to_end(install_id)
        while len(_tallies) > REMEMBERED:
            _tallies.popitem(last=False)
    live = await _count(store, install_id, updated.upto, None)
    return _merge(updated.days, live)
