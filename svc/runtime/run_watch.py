"""Watching runs from an API process: one shared poller for every stream subscriber.

A run executes in its install's actor, which may sit on another node and is reached
through any API process, so a stream cannot wait on an in-process signal: the events
are in MongoDB (svc/runtime/run_events.py). Each API process runs ONE poll loop while
it has subscribers: every `POLL_S` it reads how many events each watched run has, with
its newest few (one query by `_id`, one document per run), reads further back only for a
run that moved by more than those, and hands the new events to their subscribers. The database's load from
streams is then one query per tick per process plus one per run that moved, whatever
the number of subscribers or of stored events.

A run can also end without events (it was refused, cancelled while queued, or settled
failed by recovery or the sweeper): every `STATUS_EVERY` ticks the loop reads the status
of runs whose subscribers have been quiet, and once a run has been settled for `GRACE`
without a last event, its subscribers get one made from the run record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from svc.core import Store, aware, iso, utcnow
from svc.runtime.run_events import TERMINAL, RunEvents

log = logging.getLogger(__name__)

POLL_S = 0.05
STATUS_EVERY = 20  # ticks: about once a second
# How long after a run settled its own last event may still be on its way (the actor writes
# it after settling the run).
GRACE = timedelta(seconds=3)
SETTLED = ("completed", "failed", "cancelled", "paused")
MAX_WATCHED = 1000  # runs per query; more are polled on later ticks
MAX_SUBSCRIBERS = 2000  # open streams per API process; more are refused (503, retry)
# What a subscription receives when the process stops watching.
CLOSING: dict[str, Any] = {"type": "closing"}


@dataclass(eq=False)
class Subscription:
    """One stream's place in one run: events after `cursor` arrive on `queue`."""

    run_id: str
    cursor: int
    queue: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)
    quiet_ticks: int = 0

    async def next(self, within_s: float) -> dict[str, Any] | None:
        """The next event, or None when none came within `within_s` seconds."""
        try:
            return await asyncio.wait_for(self.queue.get(), within_s)
        except TimeoutError:
            return None


class RunWatch:
    """The process's poller of run events, shared by every stream."""

    def __init__(self, store: Store, poll_s: float = POLL_S) -> None:
        self.store = store
        self.events = RunEvents(store)
        self.poll_s = poll_s
        self._subs: dict[str, set[Subscription]] = {}
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    def has_room(self) -> bool:
        """Whether this process takes another stream (a bound on what streams may hold open)."""
        return sum(len(subs) for subs in self._subs.values()) < MAX_SUBSCRIBERS

    def subscribe(self, run_id: str, after: int) -> Subscription:
        """Follow the run from the event after `after` (0: from its first event)."""
        sub = Subscription(run_id, after)
        self._subs.setdefault(run_id, set()).add(sub)
        self._wake.set()  # a new subscriber's backlog is read at once, not at the next tick
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop())
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """Stop following (the stream ended or its client left)."""
        subs = self._subs.get(sub.run_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[sub.run_id]

    async def close(self) -> None:
        """Stop the poll loop and end every stream (the process is shutting down; clients
        reconnect, to another process, with Last-Event-ID)."""
        for sub in (s for subs in self._subs.values() for s in subs):
            sub.queue.put_nowait(CLOSING)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        tick = 0
        while self._subs:
            tick += 1
            self._wake.clear()  # before the poll: a subscriber arriving during it wakes the next one
            try:
                await self._poll()
                if tick % STATUS_EVERY == 0:
                    await self._settled_without_end()
            except Exception as exc:  # a database hiccup: streams wait, the loop goes on
                log.warning("run watch poll failed: %s", type(exc).__name__)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll_s)

    async def _poll(self) -> None:
        watched = list(self._subs)[:MAX_WATCHED]
        for sub in (s for subs in self._subs.values() for s in subs):
            sub.quiet_ticks += 1
        heads = await self.events.heads(watched) if watched else {}
        for run_id, (head, tail) in heads.items():
            subs = self._subs.get(run_id)
            cursor = min(sub.cursor for sub in subs) if subs else head
            if head <= cursor:
                continue
            # The newest few came with the count; a subscriber further behind reads the rest.
            fresh = tail if tail and tail[0]["seq"] <= cursor + 1 else await self.events.after(run_id, cursor)
            for event in fresh:
                for sub in self._subs.get(run_id, ()):
                    if event["seq"] > sub.cursor:
                        sub.cursor = event["seq"]
                        sub.quiet_ticks = 0
                        sub.queue.put_nowait(event)

    async def _settled_without_end(self) -> None:
        """A last event made from the run record, for settled runs whose actor wrote none."""
        quiet = [
            run_id
            for run_id, subs in self._subs.items()
            if all(sub.quiet_ticks >= STATUS_EVERY for sub in subs)
        ]
        if not quiet:
            return
        fields = ("status", "endedAt", "pausedAt", "errorMessage", "inputTokens", "outputTokens")
        settled = (
            await self.store["pipeline_runs"]
            .find(
                {"_id": {"$in": quiet[:MAX_WATCHED]}, "status": {"$in": list(SETTLED)}},
                dict.fromkeys(fields, 1),
            )
            .to_list(None)
        )
        now = utcnow()
        for run in settled:
            at = run.get("endedAt") or run.get("pausedAt")
            if at is None or now - aware(at) < GRACE:
                continue
            subs = self._subs.get(run["_id"])
            # Read again: the last event may have arrived since this tick's poll.
            if not subs or await self.events.after(run["_id"], min(sub.cursor for sub in subs), 1):
                continue
            event = settled_event(run)
            for sub in self._subs.get(run["_id"], ()):
                sub.quiet_ticks = 0
                sub.queue.put_nowait({**event, "seq": sub.cursor + 1})


def settled_event(run: dict[str, Any]) -> dict[str, Any]:
    """The last event of a run that ended without writing one (not stored)."""
    status = run["status"]
    kind = status if status in TERMINAL else "failed"
    event: dict[str, Any] = {
        "type": kind,
        "at": iso(run.get("endedAt") or run.get("pausedAt")),
        "status": status,
        "inputTokens": run.get("inputTokens") or 0,
        "outputTokens": run.get("outputTokens") or 0,
    }
    if kind != "paused":
        event["error"] = run.get("errorMessage")
    return event
