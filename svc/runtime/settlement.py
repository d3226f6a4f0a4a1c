"""What a run's end (or pause) owes, and the settlement that pays it (a transactional outbox).

The write that ends or pauses a run (svc/runtime/ledger.py) also lists, in the run's `owed`,
the side effects that must follow it:

- `record`: the run record (the run list, billing), its counters and its template's newest runs
  (svc/runs/recording.py, exactly once per counter); the install's all-time counter keeps its
  `lastRunAt`, so the install's own document is not written on every run;
- `steps`: what the run's journal holds that other readers want: each agent step
  (`agent_runs`, and its `step_*` event for the console's feeds and run log), each outbound
  request's security-log entry (and its timeline entry when it was blocked or judged), a pause's
  `gate_triggered` event;
- `lastRun`: owed by runs of earlier releases (the install's `lastRunAt`, now the counter's):
  cleared with nothing to write;
- `schedule`: a scheduled run's outcome (consecutive failures; pausing the schedule);
- `callback`: the webhook callback, stored due now (svc/runtime/callbacks.py).

`Settlement.settle` pays them all in ONE round trip (a cross-collection batch, svc/core/bulk.py)
whose last operation removes them from `owed`; runs settling at the same moment in one process
share the batch (group commit). Every operation is idempotent, so a batch cut short by a crash
or a database error is simply sent again: by the actor's next beat, its recovery, or the sweeper
(svc/jobs.py), which finishes every run still owing. Only three things happen after the batch:
the run metrics of GET /metrics are counted (held and written once a second in an install's
actor, like its token counts: operational counts, which billing never reads), the callback's
first attempt (an HTTP call; retried by the job runner if it fails) and, for a failed scheduled
run, the check that pauses its schedule (`schedule` is cleared once it ran).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from plugins import tracing
from svc.core import Batch, Document, MetricChange, Store, aware, utcnow
from svc.installs import find_install
from svc.runs import record_managed, record_of, run_metric_changes
from svc.runtime import ledger, security_log
from svc.runtime.callbacks import CallbackDelivery
from svc.runtime.llm import Count
from svc.runtime.pipeline_events import Events, EventType
from svc.runtime.schedules import note_scheduled_outcome, pause_if_failing

log = logging.getLogger(__name__)

RECORD, STEPS, LAST_RUN, SCHEDULE, CALLBACK = "record", "steps", "lastRun", "schedule", "callback"
OWED = (RECORD, STEPS, LAST_RUN, SCHEDULE, CALLBACK)


def owed_on_end(run: Document) -> list[str]:
    """What a run that ends owes (an eval run: its steps only, docs/evals.md)."""
    if run.get("source") == "eval":
        return [STEPS]
    owed = [RECORD, STEPS]
    if run.get("source") == "schedule":
        owed.append(SCHEDULE)
    if run.get("callbackUrl"):
        owed.append(CALLBACK)
    return owed


def owed_on_pause(run: Document) -> list[str]:
    """What a run that pauses at a gate owes: its steps so far, and the `paused` callback."""
    return [STEPS, CALLBACK] if run.get("callbackUrl") else [STEPS]


def outcome_of(run: Document) -> dict[str, Any]:
    """The callback's and the caller's view of where the run stands."""
    outcome = {
        "runId": run["_id"],
        "status": run["status"],
        "response": run.get("response"),
        "inputTokens": int(run.get("inputTokens") or 0),
        "outputTokens": int(run.get("outputTokens") or 0),
    }
    if run["status"] == "paused":
        outcome["pausedAtGate"] = run.get("pausedAtGate")
    return outcome


@dataclass
class _Pending:
    run: Document
    install: Document | None
    done: asyncio.Future[None]
    # The trace its callback joins: the settling run's span, else the run's stored context
    # (taken per run: a group's batch is built in whichever run's task leads it; tracing, #33).
    trace: dict[str, str] = field(default_factory=dict)


@dataclass
class _Queue:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    pending: list[_Pending] = field(default_factory=list)


_queues: weakref.WeakKeyDictionary[Store, _Queue] = weakref.WeakKeyDictionary()


class Settlement:
    """Pays what runs owe (see the module docstring)."""

    def __init__(self, store: Store, callbacks: CallbackDelivery, count: Count | None = None) -> None:
        self.store = store
        self.callbacks = callbacks
        # Where the run metrics of settled runs go (svc/runtime/llm.py `Count`; in an install's
        # actor, held and written once a second): nothing billing reads, so not in the batch.
        self.count = count
        self.events = Events(store)
        self._attempts: set[asyncio.Task[Any]] = set()

    async def settle(self, run: Document, install: Document | None) -> None:
        """Pay what `run` (as it stands after its end or pause write) owes; returns once it is
        stored, or raises (the run keeps owing; whoever settles next pays it)."""
        if not run.get("owed"):
            return
        queue = _queues.setdefault(self.store, _Queue())
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.pending.append(_Pending(run, install, done, tracing.carrier() or run.get("trace") or {}))
        async with queue.lock:
            if not done.done():
                group, queue.pending = queue.pending, []
                await asyncio.shield(asyncio.ensure_future(self._pay(group)))
        done.result()
        await self._after(run, install)

    async def finish(self, run_id: str) -> bool:
        """Pay what a run still owes, reading it (and its install) first: the sweeper and an
        actor's recovery. True when it owed something and it is now paid."""
        run = await ledger.get(self.store, run_id, heavy=True)
        if run is None or not run.get("owed"):
            return False
        install = await find_install(self.store, run["installId"])
        await self.settle(run, install)
        return True

    async def _pay(self, group: list[_Pending]) -> None:
        """One batch for the whole group; every caller learns the outcome."""
        batch, metrics = Batch(self.store), list[MetricChange | None]()
        now = utcnow()
        for item in group:
            self._ops(batch, metrics, item.run, item.install, now, item.trace)
        try:
            await batch.commit()
        except BaseException as exc:
            _fail(group, exc)
            if not isinstance(exc, Exception):
                raise
            return None
        for item in group:
            if not item.done.done():
                item.done.set_result(None)
        if self.count is not None:  # operational counts, after the waiters have their answer
            await self.count(metrics)
        return None

    def _ops(
        self,
        batch: Batch,
        metrics: list[MetricChange | None],
        run: Document,
        install: Document | None,
        now: datetime,
        trace: dict[str, str] | None = None,
    ) -> None:
        """The operations of one run's owed effects, its `owed` cleared last; its run metrics go
        to `metrics`."""
        owed = list(run.get("owed") or [])
        later = [SCHEDULE] if SCHEDULE in owed and run["status"] != "completed" else []
        if install is not None:
            if RECORD in owed and run["status"] in ledger.SETTLED:
                record = self._record(run, install)
                record_managed(batch, record, tool_counts(run))
                metrics += run_metric_changes([record])
            if CALLBACK in owed and run.get("callbackUrl"):
                phase = f"{run['status']}:{run.get('seq') or 0}"
                self.callbacks.owe(
                    batch, install["_id"], run["callbackUrl"], outcome_of(run), phase, now, trace
                )
        if STEPS in owed:
            self._steps(batch, metrics, run)
        if SCHEDULE in owed:
            note_scheduled_outcome(batch, run["installId"], run["_id"], run["status"] == "completed")
        names = [name for name in owed if name not in later]
        ledger.paid(batch, run["_id"], names, len(run.get("journal") or []))

    @staticmethod
    def _record(run: Document, install: Document) -> Document:
        return record_of(
            install,
            run_id=run["_id"],
            agent_key=run.get("agentKey"),
            status=run["status"],
            source=run.get("source") or "run",
            input_tokens=int(run.get("inputTokens") or 0),
            output_tokens=int(run.get("outputTokens") or 0),
            error_message=run.get("errorMessage"),
            platform_agent_id=run.get("platformAgentId"),
            created_at=run.get("endedAt"),
            platform_run_id=run.get("platformRunId"),
            billable=bool(run.get("billable")),
            started_at=run.get("startedAt"),
            template_version=run.get("templateVersion"),
        )

    def _steps(self, batch: Batch, metrics: list[MetricChange | None], run: Document) -> None:
        """The journal's steps and requests since the last settlement, for their other readers."""
        run_id, install_id = run["_id"], run["installId"]
        journal = run.get("journal") or []
        for entry in journal[int(run.get("stepsSettled") or 0) :]:
            if entry.get("kind") == "agent":
                batch.put("agent_runs", agent_run(run, entry))
                kind: EventType = (
                    "step_cancelled"
                    if entry.get("cancelled")
                    else ("step_completed" if entry.get("status") == "completed" else "step_failed")
                )
                event = self.events.document(
                    install_id,
                    kind,
                    step_key=entry["agent"],
                    meta={"runId": run_id},
                    event_id=entry.get("eventId") or f"{run_id}:{entry['key']}",
                )
                batch.put("pipeline_events", event)
            elif entry.get("security"):  # a tool call made, or one that asked for a person's approval
                security_log.add_to(
                    batch, entry["security"], entry["securityId"], entry["timelineId"], entry["at"]
                )
                metrics += security_log.decision_changes(entry["security"])
        if run.get("endEvent"):  # settled from outside its steps (cancelled while queued, interrupted)
            event = self.events.document(
                install_id,
                run["endEvent"],
                step_key=run.get("agentKey"),
                meta={"runId": run_id},
                event_id=f"{run_id}:end",
            )
            batch.put("pipeline_events", event)
        if run["status"] == "paused":
            state = run.get("state") or {}
            event = self.events.document(
                install_id,
                "gate_triggered",
                step_key=state.get("stepKey"),
                gate_name=run.get("pausedAtGate"),
                meta={"runId": run_id},
                event_id=state.get("eventId") or f"{run_id}:gate:{run.get('seq') or 0}",
            )
            batch.put("pipeline_events", event)

    async def _after(self, run: Document, install: Document | None) -> None:
        """What follows the batch: the schedule's pause check, and the callback's first attempt."""
        if SCHEDULE in (run.get("owed") or []) and run["status"] != "completed":
            await pause_if_failing(self.store, run["installId"], run.get("errorMessage"))
            await ledger.paid_now(self.store, run["_id"], [SCHEDULE])
        if CALLBACK in (run.get("owed") or []) and install is not None:
            task = asyncio.ensure_future(self.callbacks.first_attempt(install, run["_id"]))
            self._attempts.add(task)
            task.add_done_callback(self._attempts.discard)

    async def close(self) -> None:
        """Let first attempts in progress end (the job runner retries what they miss)."""
        if self._attempts:
            await asyncio.wait(set(self._attempts), timeout=5.0)


def _fail(group: list[_Pending], exc: BaseException) -> None:
    for item in group:
        if not item.done.done():
            item.done.set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))


def agent_run(run: Document, entry: Document) -> Document:
    """An agent step as GET .../agent-runs and the run detail read it."""
    started, ended = entry.get("startedAt"), entry.get("endedAt")
    duration = int((aware(ended) - aware(started)).total_seconds() * 1000) if started and ended else None
    return {
        "_id": f"{run['_id']}:{entry['key']}",
        "installId": run["installId"],
        "runId": run["_id"],
        "agentKey": entry["agent"],
        "path": entry["key"],
        "model": entry.get("model"),
        "iterations": entry.get("iterations"),
        "status": entry.get("status"),
        "inputTokens": int(entry.get("in") or 0),
        "outputTokens": int(entry.get("out") or 0),
        "errorMessage": entry.get("error"),
        "durationMs": duration,
        "startedAt": started,
        "createdAt": ended or utcnow(),
    }


def tool_counts(run: Document) -> tuple[int, int]:
    """(outbound calls, failed ones) of the run: failed when blocked, unanswered or 400 and up."""
    calls = failed = 0
    for entry in run.get("journal") or []:
        security = entry.get("security") if entry.get("kind") == "tool" else None
        if security is not None:
            calls += 1
            status = security.get("statusCode")
            failed += 1 if status is None or status >= 400 else 0
    return calls, failed
