"""A run's events: what a watcher of the run is told, in order (docs/runs.md).

`run_started`, `step_started`, `tool_call` (with the access policy's decision), `step_finished`
(with tokens), then `paused`, `completed` or `failed`; a continued run adds `resumed`. They are
stored in the run's own document (`events`, their count in `seq`) by the same writes that store
its steps (svc/runtime/journal.py), so there is no separate event flush and an event's position
never changes: a stream resumed with `Last-Event-ID` after any number of events is exact. While
the run runs, its actor serves them from memory (svc/runtime/host.py, `events`); afterwards, or
when no actor holds the run, they are read here.
"""

from __future__ import annotations

from typing import Any

from svc.core import Store
from svc.runtime.journal import wire
from svc.runtime.ledger import RUNS

# A stream ends after one of these (a paused run is at rest until someone continues it).
TERMINAL = frozenset({"paused", "completed", "failed"})
# What only the deployer sees: the builder's view of a run leaves these out (docs/runs.md).
PRIVATE_FIELDS = ("task", "response")
# A run's events are few (steps and tool calls, each bounded by the loop's iteration limit);
# reads page at this size so no read is unbounded.
PAGE = 500


def redacted(event: dict[str, Any]) -> dict[str, Any]:
    """The event without the deployer's content (the builder's view)."""
    return {k: v for k, v in event.items() if k not in PRIVATE_FIELDS}


class RunEvents:
    """Reads a run's stored events."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def after(self, run_id: str, seq: int = 0, limit: int = PAGE) -> list[dict[str, Any]]:
        """The run's stored events after `seq`, oldest first, in wire form."""
        doc = await self.store[RUNS].find_one({"_id": run_id}, {"events": {"$slice": [seq, limit]}, "seq": 1})
        return [wire(seq + n, event) for n, event in enumerate((doc or {}).get("events") or [], 1)]

    async def newest(self, run_id: str) -> dict[str, Any] | None:
        """The run's newest stored event in wire form (None when it has none)."""
        doc = await self.store[RUNS].find_one({"_id": run_id}, {"seq": 1, "events": {"$slice": -1}})
        if not doc or not doc.get("events"):
            return None
        return wire(int(doc["seq"]), doc["events"][-1])


__all__ = ["PAGE", "PRIVATE_FIELDS", "TERMINAL", "RunEvents", "redacted", "wire"]
