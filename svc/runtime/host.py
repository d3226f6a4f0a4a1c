"""The home of an install's runs: what its actor holds and does, in plain asyncio (no Ray).

The install's actor (actors/install_actor.py) is a thin Ray wrapper around one `InstallHost`:
every command for a run of the install arrives here, typed (svc/core/run_commands.py). The host

- keeps each active run in memory (`LiveRun`): its task, its recorder, its events, so a watcher
  on any API process gets them from here while it runs (`events`, a long poll);
- runs at most `max_runs` at once; later starts wait in order, still `queued`, with a position;
- recovers when a copy of the actor starts: takes the install over (its incarnation), adopts
  the runs an earlier copy was running and resumes them from their journals (at most
  `max_resumes` times each, then they end failed), starts runs left queued, holds paused runs,
  and pays what ended runs still owe;
- beats (`tick`): the incarnation record, then what could not be written before (a settlement
  the database refused, an end that could not be recorded).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from plugins import tracing
from svc.core import (
    Accepted,
    Cancel,
    Cancelled,
    Continue,
    Continued,
    Document,
    NotFound,
    RunOutcome,
    StartRun,
    Store,
    Watched,
    WatchEvents,
    utcnow,
)
from svc.installs import find_install, run_definition
from svc.runtime import incarnations, ledger, neglected_runs
from svc.runtime.install_runner import INTERRUPTED, InstallRunner, Mode
from svc.runtime.journal import RunRecorder
from svc.runtime.settlement import OWED

log = logging.getLogger(__name__)

NO_PENDING_GATE = "No pending gate found for this install"
NO_AGENTS_LEFT = "No agents remaining after gate"
DECISIONS = {"outcome-unknown": ("done", "resend", "fail"), "tool-approval": ("approve", "reject")}
# How long a finished run's events stay here for late watchers (then they read the store).
KEEP_ENDED_S = 30.0


@dataclass
class LiveRun:
    """One run this actor holds: its task, its recorder and the events stored so far here."""

    run_id: str
    task: asyncio.Task[RunOutcome] | None = None
    recorder: RunRecorder | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    base: int = 0  # seq of the event before `events[0]` (older ones are read from the store)
    outcome: RunOutcome | None = None
    ended_at: float | None = None
    admitted: bool = False  # a spend cap let one of its model calls through: it counts in flight
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def publish(self, events: list[dict[str, Any]]) -> None:
        """New stored events: keep them and wake the watchers."""
        if not self.events:
            self.base = events[0]["seq"] - 1
        self.events.extend(events)
        self.changed.set()
        self.changed = asyncio.Event()

    @property
    def step(self) -> str | None:
        return self.recorder.current_agent if self.recorder is not None else None


class InstallHost:
    """Owns one install's runs in this process (see the module docstring)."""

    def __init__(
        self,
        install_id: str,
        store: Store,
        runner: InstallRunner,
        *,
        max_runs: int = 16,
        max_resumes: int = 2,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.install_id = install_id
        self.store = store
        self.runner = runner
        self.max_resumes = max_resumes
        self.live: dict[str, LiveRun] = {}
        self.paused: dict[str, Document] = {}
        self.slots = asyncio.Semaphore(max_runs)
        self.waiting: list[str] = []  # run ids waiting for a slot, in order
        # Runs a person cancelled: one whose end could not be written is ended, never resumed.
        self.cancelled: set[str] = set()
        self.now = now
        self.last_used = now()

    @property
    def incarnation(self) -> str:
        return self.runner.incarnation

    @property
    def busy(self) -> bool:
        """Whether any run is running or waiting here."""
        return any(live.task is not None and not live.task.done() for live in self.live.values())

    # ---- start-up --------------------------------------------------------------------------------

    async def recover(
        self, actor: str | None = None, only_if_free: timedelta | None = None, node: str | None = None
    ) -> bool:
        """Take the install over from any earlier copy (see the module docstring); `actor` and
        `node` name the Ray actor this host lives in and its node. A spare adopting the install
        (`only_if_free`: how old a holder's beat must be to count as gone) takes it only when no
        live copy holds it: False."""
        if only_if_free is not None:
            if not await incarnations.adopt_install(
                self.store, self.install_id, self.incarnation, actor or "", utcnow(), only_if_free, node
            ):
                return False
        else:
            await incarnations.take_over(self.store, self.install_id, self.incarnation, actor, node)
        for run in await neglected_runs.of_install(self.store, self.install_id):
            if run["status"] == "queued":
                if run.get("handoffAt") is not None:  # asked for (not waiting behind another run)
                    self._spawn(run, "start")
            elif run["status"] == "paused":
                self.paused[run["_id"]] = run
            elif run.get("incarnation") != self.incarnation:
                await self._adopt(run)
        for run_id in await neglected_runs.owing_of(self.store, self.install_id, OWED):
            await self.runner.settlement.finish(run_id)
        return True

    async def _adopt(self, run: Document) -> None:
        """Resume a run an earlier copy (or this one, before a database error) was running, from its
        journal; or end it, when it was resumed too often."""
        if int(run.get("resumes") or 0) >= self.max_resumes:
            await self.runner.settle_gone(run, INTERRUPTED)
            return
        resumed = ledger.event(
            "resumed", {"reason": "recovered", "resumes": int(run.get("resumes") or 0) + 1}
        )
        if await ledger.adopt(self.store, run, self.incarnation, [resumed]):
            adopted = {**run, "incarnation": self.incarnation, "seq": int(run.get("seq") or 0) + 1}
            adopted["events"] = [*(run.get("events") or []), resumed]
            self._spawn(adopted, "adopt")

    # ---- commands --------------------------------------------------------------------------------

    async def start(self, command: StartRun) -> Accepted:
        """Start a queued run without waiting (webhook, schedule, retry, wait: false)."""
        with tracing.attached(command.trace):  # the run joins the caller's trace (tracing, #33)
            live = self._spawn(command.run, "start")
        position = self.waiting.index(live.run_id) + 1 if live.run_id in self.waiting else 0
        return Accepted(live.run_id, position)

    async def run(self, command: StartRun, wait_s: float) -> RunOutcome:
        """Start a queued run and wait up to `wait_s` for its end or its gate; past that, where it
        stands (the run goes on)."""
        with tracing.attached(command.trace):  # the run joins the caller's trace (tracing, #33)
            live = self._spawn(command.run, "start")
        assert live.task is not None
        try:
            return await asyncio.wait_for(asyncio.shield(live.task), wait_s)
        except TimeoutError:
            status = "queued" if live.run_id in self.waiting else "running"
            totals = live.recorder.totals if live.recorder is not None else None
            return RunOutcome(
                live.run_id,
                status,
                inputTokens=totals.input if totals else 0,
                outputTokens=totals.output if totals else 0,
            )
        except asyncio.CancelledError:
            if live.task.done() and not live.task.cancelled():
                return live.task.result()
            raise

    async def cancel(self, command: Cancel) -> Cancelled:
        """Cancel a run of this install: one running here stops (its end records what it used);
        one only queued never starts."""
        live = self.live.get(command.run_id)
        if live is not None and live.task is not None and not live.task.done():
            step = live.step or ""
            self.cancelled.add(command.run_id)
            live.task.cancel()
            return Cancelled(True, step)
        stopped = await self.runner.stop(
            command.run_id, command.reason, event="step_cancelled", paused=command.paused
        )
        if stopped:
            self.paused.pop(command.run_id, None)
        return Cancelled(stopped, None)

    async def resume(self, command: Continue) -> Continued:
        """Continue a paused run (the oldest, or `run_id`) from where its gate stopped it."""
        if not any(command.run_id in (None, run_id) for run_id in self.paused):
            # Paused a moment ago (its pause is stored, its task not done yet), or by another copy.
            for stored in await neglected_runs.of_install(self.store, self.install_id):
                if stored["status"] == "paused":
                    self.paused.setdefault(stored["_id"], stored)
        candidates = sorted(
            (run for run in self.paused.values() if command.run_id in (None, run["_id"])),
            key=lambda run: (run.get("pausedAt") or run["createdAt"], run["_id"]),
        )
        if not candidates:
            return Continued(conflict=NO_PENDING_GATE)
        paused = candidates[0]
        state = paused.get("state") or {}
        decision = await self._decision(paused, state, command)
        if isinstance(decision, Continued):
            return decision
        data = {
            "fromStep": state.get("fromStep"),
            "bypassGates": command.bypass_gates,
            "gate": state.get("gate"),
        }
        if decision is not None:
            data["decision"] = decision["decision"]
        run = await ledger.resume(
            self.store,
            paused["_id"],
            self.incarnation,
            command.bypass_gates,
            [ledger.event("resumed", data)],
            journal=[decision] if decision is not None else [],
        )
        self.paused.pop(paused["_id"], None)
        if run is None:
            return Continued(conflict=NO_PENDING_GATE)
        await self.runner.emit_gate_approved(run, command.actor)
        with tracing.attached(command.trace):  # linked from the resumed part's span (tracing, #33)
            self._spawn(run, "resume")
        return Continued(runId=run["_id"], gate=state.get("gate"))

    async def _decision(
        self, paused: Document, state: Document, command: Continue
    ) -> Document | Continued | None:
        """The journal entry of how a person settled a gate at a tool call (None for a pipeline
        gate); a Continued conflict when the gate needs a decision it did not get."""
        if state.get("kind") != "tool":
            install = await find_install(self.store, self.install_id)
            if install is None:
                return Continued(conflict=NO_AGENTS_LEFT)
            # Issue 34: a paused pipeline keeps the version it started on, across an upgrade.
            version = paused.get("templateVersion") or state.get("templateVersion")
            try:
                agents = (await run_definition(self.store, install, version))["agents"]
            except NotFound:
                return None  # that version is gone: the resumed run ends failed, saying so
            if int(state.get("fromStep") or 0) >= len(agents):
                return Continued(conflict=NO_AGENTS_LEFT)
            return None
        allowed = DECISIONS.get(state.get("gate") or "", ())
        decision = command.decision or ("approve" if "approve" in allowed else None)
        if decision not in allowed:
            return Continued(conflict=f"This gate needs a decision: one of {', '.join(allowed)}")
        call = state.get("call") or {}
        return {
            "kind": "decision",
            "key": call.get("key"),
            "decision": decision,
            "note": command.note,
            "by": command.actor.get("actor_id"),
            "at": utcnow(),
            **({"approvalId": call["approvalId"]} if call.get("approvalId") else {}),
        }

    async def events(self, command: WatchEvents) -> Watched:
        """The run's events after `after`, waiting up to `wait_s` when there is none yet; `live`
        False when this actor does not hold them (the watcher reads the store)."""
        live = self.live.get(command.run_id)
        if live is None or (live.events and command.after < live.base) or (not live.events and live.outcome):
            return Watched([], live=False)
        fresh = [e for e in live.events if e["seq"] > command.after]
        if not fresh and live.outcome is None and command.wait_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(live.changed.wait(), command.wait_s)
            fresh = [e for e in live.events if e["seq"] > command.after]
        return Watched(fresh, live=bool(fresh) or live.outcome is None)

    # ---- inside ----------------------------------------------------------------------------------

    def _spawn(self, run: Document, mode: Mode) -> LiveRun:
        """The live run of `run` (one per run: a repeated start joins it)."""
        live = self.live.get(run["_id"])
        if live is not None and (live.task is None or not live.task.done() or mode == "start"):
            return live
        live = LiveRun(run["_id"])
        self.live[run["_id"]] = live
        self.last_used = self.now()
        live.task = asyncio.get_running_loop().create_task(self._execute(live, run, mode))
        return live

    async def _execute(self, live: LiveRun, run: Document, mode: Mode) -> RunOutcome:
        self.waiting.append(live.run_id)
        try:
            async with self.slots:
                self.waiting.remove(live.run_id)

                def attach(recorder: RunRecorder) -> None:
                    live.recorder = recorder

                outcome = await self.runner.execute(run, mode, live.publish, attach, self._admit_for(live))
        except asyncio.CancelledError:
            # Cancelled before its team ran (waiting for a slot, or being claimed): it ends here.
            if live.run_id in self.waiting:
                self.waiting.remove(live.run_id)
            outcome = await asyncio.shield(self.runner.cancel_before_team(live.run_id))
        except Exception as exc:  # the database failed where the run could not record it
            # The run stays as its last write left it; the next beat resumes it from its journal
            # once the database answers (`tick`), and a waiting caller reads its end there.
            log.error("run could not be carried out: %s", type(exc).__name__)
            outcome = RunOutcome(live.run_id, "running")
        live.outcome = outcome
        live.ended_at = self.now()
        live.changed.set()
        self.last_used = self.now()
        if outcome.status == "paused":
            paused = await ledger.get(self.store, live.run_id, heavy=True)
            if paused is not None and paused["status"] == "paused":
                self.paused[live.run_id] = paused
        return outcome

    def _admit_for(self, live: LiveRun) -> Callable[[Document], Awaitable[None]] | None:
        """The spend caps' check before each model call of `live`, told what the install's other
        runs in flight have used: this actor runs them all, so runs started together reserve
        against the cap instead of all passing it (svc/billing/spend_caps.py)."""
        admission = self.runner.admission
        if admission is None:
            return None

        async def admit(install: Document) -> None:
            others = [
                other.recorder.totals.input + other.recorder.totals.output if other.recorder else 0
                for other in self.live.values()
                if other is not live and other.admitted and other.outcome is None
            ]
            # Reserved before the check's reads, so a run checked meanwhile counts this one.
            reserved, live.admitted = live.admitted, True
            try:
                await admission(install, others)
            except BaseException:
                live.admitted = reserved
                raise

        return admit

    async def tick(self) -> bool:
        """One beat: say this copy lives (False: a newer copy took over, this one must stop),
        forget finished runs, and pay what runs of this install still owe."""
        if not await incarnations.beat(self.store, self.install_id, self.incarnation):
            return False
        cutoff = self.now() - KEEP_ENDED_S
        for run_id, known in list(self.live.items()):
            if known.ended_at is not None and known.ended_at < cutoff:
                del self.live[run_id]
        for run in await neglected_runs.running_of(self.store, self.install_id, self.incarnation):
            live = self.live.get(run["_id"])
            if live is None or (live.task is not None and live.task.done()):
                # Stranded by a database error: resume it here, or end it if it was cancelled.
                if run["_id"] in self.cancelled:
                    await self.runner.cancel_before_team(run["_id"])
                else:
                    await self._adopt(run)
        if not self.busy:
            for run_id in await neglected_runs.owing_of(self.store, self.install_id, OWED):
                with contextlib.suppress(Exception):
                    await self.runner.settlement.finish(run_id)
        return True

    def stop_all(self) -> None:
        """Cancel every run here (a newer copy took over: its recovery adopts them)."""
        for live in self.live.values():
            if live.task is not None and not live.task.done():
                live.task.cancel()
