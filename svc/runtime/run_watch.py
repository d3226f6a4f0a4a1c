"""Watching runs from an API process: one follower per watched run, shared by its streams.

A run executes in its install's actor, which may sit on another node and is reached through any
API process. While it runs, the actor holds its events (svc/runtime/host.py): the follower asks
it for the events after its cursor, waiting there until one comes (a long poll over the Runtime
port), so a step reaches the watcher as soon as it is stored, whatever process it watches from.
When no actor holds the run (queued and not handed over yet, ended, or its actor gone), the
follower reads the events stored in the run's document instead, every `POLL_S`, until the run
comes to rest. One follower per run per process, however many streams watch it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from svc.core import Runtime, RuntimeFailure, Store, WatchEvents, aware, iso, utcnow
from svc.runtime import ledger
from svc.runtime.run_watch_events import TERMINAL, RunEvents

log = logging.getLogger(__name__)

POLL_S = 0.2
LONG_POLL_S = 10.0
# A settled run whose last stored event is not a terminal one (runs of an older version) gets one
# made from its record once it has been settled this long.
GRACE = timedelta(seconds=3)
SETTLED = ("completed", "failed", "cancelled", "paused")
MAX_SUBSCRIBERS = 2000  # open streams per API process; more are refused (503, retry)
# What a subscription receives when the process stops watching.
CLOSING: dict[str, Any] = {"type": "closing"}


@dataclass(eq=False)
class Subscription:
    """One stream's place in one run: events after `cursor` arrive on `queue`."""

    run_id: str
    cursor: int
    queue: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)

    async def next(self, within_s: float) -> dict[str, Any] | None:
        """The next event, or None when none came within `within_s` seconds."""
        try:
            return await asyncio.wait_for(self.queue.get(), within_s)
        except TimeoutError:
            return None


class RunWatch:
    """The process's followers of watched runs."""

    def __init__(self, store: Store, runtime: Runtime | None = None, poll_s: float = POLL_S) -> None:
        self.store = store
        self.runtime = runtime
        self.events = RunEvents(store)
        self.poll_s = poll_s
        self._subs: dict[str, set[Subscription]] = {}
        self._followers: dict[str, asyncio.Task[None]] = {}

    def has_room(self) -> bool:
        """Whether this process takes another stream (a bound on what streams may hold open)."""
        return sum(len(subs) for subs in self._subs.values()) < MAX_SUBSCRIBERS

    def subscribe(self, install_id: str, run_id: str, after: int) -> Subscription:
        """Follow the run from the event after `after` (0: from its first event)."""
        sub = Subscription(run_id, after)
        self._subs.setdefault(run_id, set()).add(sub)
        follower = self._followers.get(run_id)
        if follower is None or follower.done():
            self._followers[run_id] = asyncio.get_running_loop().create_task(self._follow(install_id, run_id))
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """Stop following (the stream ended or its client left)."""
        subs = self._subs.get(sub.run_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[sub.run_id]

    async def close(self) -> None:
        """Stop following and end every stream (the process is shutting down; clients reconnect,
        to another process, with Last-Event-ID)."""
        for sub in (s for subs in self._subs.values() for s in subs):
            sub.queue.put_nowait(CLOSING)
        for task in self._followers.values():
            task.cancel()
        for task in list(self._followers.values()):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _follow(self, install_id: str, run_id: str) -> None:
        """Hand the run's events to its subscribers until none is left or the run is at rest."""
        try:
            while self._subs.get(run_id):
                try:
                    if not await self._step(install_id, run_id):
                        return
                except Exception as exc:  # a database or cluster hiccup: streams wait, the follower goes on
                    log.warning("run watch failed: %s", type(exc).__name__)
                    await asyncio.sleep(self.poll_s)
        finally:
            if self._followers.get(run_id) is asyncio.current_task():
                del self._followers[run_id]

    async def _step(self, install_id: str, run_id: str) -> bool:
        """One round: from the actor while it holds the run, else from the store. False once the
        run is at rest and every subscriber has its last event."""
        cursor = min((sub.cursor for sub in self._subs.get(run_id, ())), default=0)
        if self.runtime is not None:
            try:
                answer = await self.runtime.events(install_id, WatchEvents(run_id, cursor, LONG_POLL_S))
            except RuntimeFailure:
                answer = None
            if answer is not None and answer.live:
                self._deliver(run_id, answer.events)
                return True
        stored = await self.events.after(run_id, cursor)
        self._deliver(run_id, stored)
        if stored and stored[-1]["type"] in TERMINAL:
            return False
        run = await ledger.get(self.store, run_id)
        if run is None:
            return False
        if run["status"] in SETTLED:
            at = run.get("endedAt") or run.get("pausedAt")
            if at is None or utcnow() - aware(at) >= GRACE:  # ended without a last event of its own
                if not await self.events.after(run_id, cursor + len(stored), 1):
                    self._deliver(run_id, [{**settled_event(run), "seq": cursor + len(stored) + 1}])
                    return False
        await asyncio.sleep(self.poll_s)
        return True

    def _deliver(self, run_id: str, events: list[dict[str, Any]]) -> None:
        for event in events:
            for sub in self._subs.get(run_id, ()):
                if event["seq"] > sub.cursor:
                    sub.cursor = event["seq"]
                    sub.queue.put_nowait(event)


def settled_event(run: dict[str, Any]) -> dict[str, Any]:
    """The last event of a run that ended without storing one (not stored)."""
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
