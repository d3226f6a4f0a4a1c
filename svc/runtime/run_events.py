"""A run's live events (`run_events`): what a watcher of the run is told, in order.

The install's actor writes them as the run goes (docs/runs.md): `run_started`,
`step_started`, `tool_call` (with the access policy's decision), `step_finished` (with
tokens), then `paused`, `completed` or `failed`; a continued run adds `resumed`. Each
event is `{runId, seq, type, data, at}`, `seq` counting from 1 per run (a unique index
on (runId, seq)), so a stream can resume after the last id its client saw.

Writing never slows the run: `RunEventSink.emit` only queues; one flusher per run
writes what has queued in one `insert_many` (events that come together share a round
trip) and keeps their order. Only the run's end waits for the writes (`close`), so a
client that got the run's answer and then opens its stream sees the end too.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any, Literal

from pymongo import ASCENDING, DESCENDING

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


def wire(doc: dict[str, Any]) -> dict[str, Any]:
    """An event as clients see it: `{seq, type, at, ...data}`."""
    return {"seq": doc["seq"], "type": doc["type"], "at": iso(doc["at"]), **(doc.get("data") or {})}


def redacted(event: dict[str, Any]) -> dict[str, Any]:
    """The event without the deployer's content (the builder's view)."""
    return {k: v for k, v in event.items() if k not in PRIVATE_FIELDS}


class RunEventSink:
    """The events of one run as it executes in this process; `emit` never waits."""

    def __init__(self, store: Store, install_id: str, run_id: str, fresh: bool) -> None:
        self.store = store
        self.install_id = install_id
        self.run_id = run_id
        # A fresh run starts at seq 1; a resumed one continues after what is stored (read once).
        self._seq: int | None = 0 if fresh else None
        self._queued: list[tuple[str, dict[str, Any], datetime]] = []
        self._flusher: asyncio.Task[None] | None = None

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        """The agent loop's hook (`TeamRunner(events=...)`)."""
        self.emit(kind, data)

    def emit(self, kind: str, data: dict[str, Any]) -> None:
        """Queue one event; a flusher writes it (with whatever else queued meanwhile)."""
        self._queued.append((kind, data, utcnow()))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush())

    async def finish(self, result: TeamResult, pause: dict[str, Any] | None = None) -> None:
        """The run's last event (paused, completed or failed), once every event is written.

        Called after the run record is settled, so a client told "completed" reads a completed run.
        """
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
            try:
                if self._seq is None:
                    self._seq = await last_seq(self.store, self.run_id)
                docs = []
                for kind, data, at in batch:
                    self._seq += 1
                    docs.append(
                        {
                            "runId": self.run_id,
                            "installId": self.install_id,
                            "seq": self._seq,
                            "type": kind,
                            "data": data,
                            "at": at,
                        }
                    )
                await self.store["run_events"].insert_many(docs, ordered=True)
            except Exception as exc:  # watching is best effort: the run itself must go on
                log.warning("run events not written: %s", type(exc).__name__)


async def last_seq(store: Store, run_id: str) -> int:
    """The seq of the run's newest event (0 when none)."""
    doc = await store["run_events"].find_one({"runId": run_id}, {"seq": 1}, sort=[("seq", DESCENDING)])
    return int(doc["seq"]) if doc else 0


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
        resumed = "fromStep" in payload
        sink = RunEventSink(self.store, install_id, run_id, fresh=not resumed)
        if resumed:
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
        sink = self._open.pop(run_id, None) or RunEventSink(self.store, install_id, run_id, fresh=False)
        await sink.finish(result, pause)

    async def after(self, run_id: str, seq: int = 0, limit: int = PAGE) -> list[dict[str, Any]]:
        """The run's stored events after `seq`, oldest first, in wire form."""
        docs = (
            await self.store["run_events"]
            .find({"runId": run_id, "seq": {"$gt": seq}})
            .sort([("seq", ASCENDING)])
            .to_list(limit)
        )
        return [wire(doc) for doc in docs]

    async def newest(self, run_id: str) -> dict[str, Any] | None:
        """The run's newest event in wire form (None when it has none)."""
        doc = await self.store["run_events"].find_one({"runId": run_id}, sort=[("seq", DESCENDING)])
        return wire(doc) if doc else None

    async def since(self, cursors: dict[str, int], limit: int = PAGE) -> list[dict[str, Any]]:
        """New events of many runs at once (one query): `{runId: after seq}`; raw documents."""
        if not cursors:
            return []
        query = {"$or": [{"runId": run_id, "seq": {"$gt": seq}} for run_id, seq in cursors.items()]}
        return await self.store["run_events"].find(query).sort([("seq", ASCENDING)]).to_list(limit)
