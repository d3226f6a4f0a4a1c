"""A run's live events (`run_events`): what a watcher of the run is told, in order.

The install's actor writes them as the run goes (docs/runs.md): `run_started`,
`step_started`, `tool_call` (with the access policy's decision), `step_finished` (with
tokens), then `paused`, `completed` or `failed`; a continued run adds `resumed`.

One document per run, `{_id: runId, installId, seq, events: [{type, data, at}]}`: an
event's `seq` is its position (from 1), and `seq` on the document counts them. Each write
is one `$push` + `$inc` on that document, so the order is the database's and a resumed
run needs no read to continue numbering. A poller asks for the `seq` of every run it
watches in one query by `_id` (matching one small document per run, however many events
there are), then reads only the runs that moved, from their cursor (`$slice`). (One
document per event would need an `$or` of per-run cursors, which the embedded store
answers by scanning the whole collection: 3.3 s at 20,000 events.)

Writing never slows the run: `RunEventSink.emit` only queues; one flusher per run
writes what has queued in one update (events that come together share a round trip)
and keeps their order. Only the run's end waits for the writes (`finish`), so a client
that got the run's answer and then opens its stream sees the end too.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Literal

from pymongo.errors import DuplicateKeyError

from svc.core import Store, iso, utcnow
from svc.runtime.agent_loop import TeamResult

log = logging.getLogger(__name__)

EventKind = Literal[
    "run_started",
    "resumed",
    "step_started",
    "tool_call",
    "step_finished",
    "paused",
    "completed",
    "failed",
]
# A stream ends after one of these (a paused run is at rest until someone continues it).
TERMINAL = frozenset({"paused", "completed", "failed"})
# What only the deployer sees: the builder's view of a run leaves these out (docs/runs.md).
PRIVATE_FIELDS = ("task", "response")
# A run's events are few (steps and tool calls, each bounded by the loop's iteration limit);
# reads page at this size so no read is unbounded.
PAGE = 500
# How many of each watched run's newest events a poll brings back with its count.
TAIL = 3


def wire(seq: int, event: dict[str, Any]) -> dict[str, Any]:
    """An event as clients see it: `{seq, type, at, ...data}`."""
    return {"seq": seq, "type": event["type"], "at": iso(event["at"]), **(event.get("data") or {})}


def redacted(event: dict[str, Any]) -> dict[str, Any]:
    """The event without the deployer's content (the builder's view)."""
    return {k: v for k, v in event.items() if k not in PRIVATE_FIELDS}


class RunEventSink:
    """The events of one run as it executes in this process; `emit` never waits."""

    def __init__(self, store: Store, install_id: str, run_id: str) -> None:
        self.store = store
        self.install_id = install_id
        self.run_id = run_id
        self._queued: list[dict[str, Any]] = []
        self._flusher: asyncio.Task[None] | None = None

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        """The agent loop's hook (`TeamRunner(events=...)`)."""
        self.emit(kind, data)

    def emit(self, kind: str, data: dict[str, Any]) -> None:
        """Queue one event; a flusher writes it (with whatever else queued meanwhile)."""
        self._queued.append({"type": kind, "data": data, "at": utcnow()})
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush())

    async def finish(self, result: TeamResult, pause: dict[str, Any] | None = None) -> None:
        """The run's last event (paused, completed or failed), once every event is written."""
        if pause is not None:
            self.emit("paused", {**_totals(result), "gate": pause["gate"], "status": "paused"})
        else:
            data = {
                **_totals(result),
                "agent": result.agent,
                "error": result.error,
                "response": result.response,
            }
            self.emit("completed" if result.status == "completed" else "failed", data)
        while self._flusher is not None and not self._flusher.done():
            await asyncio.shield(self._flusher)

    async def _flush(self) -> None:
        while self._queued:
            batch, self._queued = self._queued, []
            update = {
                "$push": {"events": {"$each": batch}},
                "$inc": {"seq": len(batch)},
                "$setOnInsert": {"installId": self.install_id},
            }
            try:
                try:
                    await self.store["run_events"].update_one({"_id": self.run_id}, update, upsert=True)
                except DuplicateKeyError:  # two first writes raced to create it: the loser updates
                    await self.store["run_events"].update_one({"_id": self.run_id}, update)
            except Exception as exc:  # watching is best effort: the run itself must go on
                log.warning("run events not written: %s", type(exc).__name__)


def _totals(result: TeamResult) -> dict[str, Any]:
    return {"status": result.status, "inputTokens": result.input_tokens, "outputTokens": result.output_tokens}


class RunEvents:
    """Writes (through sinks) and reads a run's events."""

    def __init__(self, store: Store) -> None:
        self.store = store
        # The sinks of the runs executing in this process, until their last event.
        self._open: dict[str, RunEventSink] = {}

    def open(
        self, install_id: str, run_id: str, agent: str, payload: dict[str, Any], source: str | None
    ) -> RunEventSink:
        """The sink of one execution of a run (for `TeamRunner(events=...)`), its first event queued:
        `run_started` (with the task, which only the deployer sees), or `resumed` when the payload
        continues a paused pipeline (`fromStep`)."""
        sink = RunEventSink(self.store, install_id, run_id)
        if "fromStep" in payload:
            data = {"fromStep": payload["fromStep"], "bypassGates": bool(payload.get("bypassGates"))}
            sink.emit("resumed", data)
        else:
            sink.emit("run_started", {"source": source or "run", "agent": agent, "task": payload.get("task")})
        self._open[run_id] = sink
        return sink

    async def finish(
        self, install_id: str, run_id: str, result: TeamResult, pause: dict[str, Any] | None = None
    ) -> None:
        """The run's last event (`paused`, `completed` or `failed`), once every event is written.

        Called after the run is settled in its ledger, so a client told "completed" reads a
        completed run. A run settled without an open sink here (recovered, aborted) gets its last
        event after the ones already stored.
        """
        sink = self._open.pop(run_id, None) or RunEventSink(self.store, install_id, run_id)
        await sink.finish(result, pause)

    async def after(self, run_id: str, seq: int = 0, limit: int = PAGE) -> list[dict[str, Any]]:
        """The run's stored events after `seq`, oldest first, in wire form."""
        doc = await self.store["run_events"].find_one({"_id": run_id}, {"events": {"$slice": [seq, limit]}})
        return [wire(seq + n, event) for n, event in enumerate((doc or {}).get("events") or [], 1)]

    async def newest(self, run_id: str) -> dict[str, Any] | None:
        """The run's newest event in wire form (None when it has none)."""
        doc = await self.store["run_events"].find_one({"_id": run_id}, {"seq": 1, "events": {"$slice": -1}})
        if not doc or not doc.get("events"):
            return None
        return wire(int(doc["seq"]), doc["events"][-1])

    async def heads(self, run_ids: list[str]) -> dict[str, tuple[int, list[dict[str, Any]]]]:
        """For each of these runs with events: how many it has, and its newest `TAIL` events in
        wire form (most polls find at most that many new, so one query answers them)."""
        docs = (
            await self.store["run_events"]
            .find({"_id": {"$in": run_ids}}, {"seq": 1, "events": {"$slice": -TAIL}})
            .to_list(None)
        )
        out = {}
        for doc in docs:
            head, tail = int(doc["seq"]), doc.get("events") or []
            out[doc["_id"]] = (head, [wire(head - len(tail) + n, e) for n, e in enumerate(tail, 1)])
        return out
