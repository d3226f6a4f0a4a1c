"""Executing runs of managed installs, inside the install's actor.

`InstallRunner` claims a queued run in the ledger, loads the install, fills in its secrets,
runs the team, and persists every state change (the pipeline run, each agent step, the run
record) before answering; a webhook run's outcome is then posted to its callback, signed and durably retried.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pymongo.errors import PyMongoError

from plugins import tracing
from svc.core import (
    Conflict,
    Document,
    Mailer,
    Store,
    Vault,
    tokens,
    utcnow,
)
from svc.installs import interpolate, touch_last_run
from svc.runs import Runs
from svc.runtime import ledger
from svc.runtime.agent_loop import AgentStep, RunScope, TeamResult, TeamRunner
from svc.runtime.callbacks import CallbackDelivery
from svc.runtime.events import Events, EventType
from svc.runtime.llm import LLM
from svc.runtime.pipelines import PipelineExecutor
from svc.runtime.run_events import RunEvents
from svc.runtime.schedules import note_scheduled_outcome
from svc.runtime.security_log import SecurityLog

log = logging.getLogger(__name__)

CANCELLED = "Run cancelled"
INTERRUPTED = "Interrupted: the install's worker stopped during the run; start it again"
SUPERSEDED = "Superseded: a newer copy of the install's worker took the run over"
DATABASE_DOWN = "Database unavailable during the run"
UPSTREAM_IDS = ("platformRunId", "platformAgentId", "platformTaskId")
# Spend caps (h-caps): called with the install before any model call; a Conflict refuses the run.
Admission = Callable[[Document], Awaitable[None]]
# (install, completed?, billable?, tokens) -> (pricing model, price in cents, amount in cents) the run
# is billed at (svc.billing.run_charge; injected, billing sits above the runtime): the run span's
# billed amount (tracing, #33).
Costing = Callable[[Document, bool, bool, int], Awaitable[tuple[str, int | None, int]]]


class InstallRunner:
    """Runs one install's work; lives in the install's actor, which owns the install's runs.

    Every status change goes through the ledger (svc/runtime/ledger.py) stamped with this
    runner's incarnation, so a copy a newer one superseded can neither finish nor pause a run.
    """

    def __init__(
        self,
        store: Store,
        vault: Vault,
        llm: LLM,
        judge_model: str,
        allow_private: bool,
        mailer: Mailer | None = None,
        admission: Admission | None = None,
        costing: Costing | None = None,
    ) -> None:
        self.store = store
        self.costing = costing  # the billed amount on the run's span (tracing, #33)
        self.pipelines = PipelineExecutor(store, mailer or Mailer(store))
        self.vault = vault
        self.judge_model = judge_model
        self.allow_private = allow_private
        self.admission = admission
        self.runs = Runs(store)
        self.llm = llm
        self.security_log = SecurityLog(store)
        self.events = Events(store)
        self.run_events = RunEvents(store)  # a run's live events (docs/runs.md)
        # Webhook callbacks, stored before the first attempt and retried by the job runner.
        self.callbacks = CallbackDelivery(store, vault, allow_private)
        # The step each active run is in (for cancel-run's answer).
        self.current_steps: dict[str, AgentStep] = {}
        # This runner's incarnation: every run it claims is stamped with it, so a restarted
        # worker recovers only what an earlier incarnation had claimed.
        self.incarnation = tokens.new_id()

    async def recover(self, install_id: str) -> tuple[list[str], dict[str, Document]]:
        """Take the install over from any earlier incarnation: runs an earlier one had claimed end
        failed (with their run record, step event and callback); runs only queued are returned to
        be started, and paused runs to be held (pipeline state lives with the actor)."""
        await ledger.take_over(self.store, install_id, self.incarnation)
        queued: list[str] = []
        paused: dict[str, Document] = {}
        install: Document | None = None
        for run in await ledger.of_install(self.store, install_id):
            if run["status"] == "queued":
                if run.get("handoffAt") is not None:  # asked for (not waiting behind another run)
                    queued.append(run["_id"])
            elif run["status"] == "paused":
                paused[run["_id"]] = run
            elif run.get("incarnation") != self.incarnation:
                install = install or await self.store.installs.find_one({"_id": install_id})
                await self.settle_failed(install, run, INTERRUPTED)
        return queued, paused

    async def settle_failed(self, install: Document | None, run: Document, message: str) -> bool:
        """End a run whose worker is gone as failed, and write what a failed run leaves everywhere
        else: its run record, a step_failed event (the run log) and its callback."""
        settled = await ledger.settle(self.store, run, message)
        if settled is None:
            return False
        await self._recorded(install, settled, "failed", 0, 0, message, step_event="step_failed")
        if install is not None and settled.get("callbackUrl"):
            await self.callback(install, settled["callbackUrl"], failed_outcome(run["_id"], message))
        return True

    async def execute(self, install_id: str, run_id: str, resumed: Document | None = None) -> dict[str, Any]:
        """Claim a queued run (or carry on a resumed one), run the team, persist the outcome,
        post the callback if one was asked for. Idempotent: a run not queued is not run again."""
        run = resumed or await ledger.claim(self.store, run_id, self.incarnation, None)
        if run is None:
            return await self.outcome_now(run_id)
        gate = (run.get("state") or {}).get("gate") if resumed is not None else None
        with tracing.run_span(  # the run's span, in the trace of whoever asked for it (tracing, #33)
            run_id,
            run.get("source"),
            run.get("trace"),
            retry_of=run.get("retryOf"),
            resumed_gate=gate,
            bypass_gates=bool(run.get("bypassGates")),
        ):
            return await self._execute(install_id, run)

    async def _execute(self, install_id: str, run: Document) -> dict[str, Any]:
        """The claimed (or resumed) run: the team, the outcome, the callback."""
        run_id = run["_id"]
        # Written first (the claim), read second: a cancellation of the install that answered
        # before this read is seen, so no run starts after it has answered (docs/consistency.md).
        install = await self.store.installs.find_one({"_id": install_id})
        if install is None or install["status"] != "completed":
            return await self._refused(install, run_id)
        tracing.run_install(  # tracing (#33)
            install_id,
            install.get("templateId"),
            install.get("templateVersion"),
            install.get("templateName"),
            install["platform"],
        )
        definition = interpolate(install["definition"], install.get("variables") or {})
        root_key = next(
            (a["key"] for a in definition["agents"] if not a.get("reportsTo")), definition["agents"][0]["key"]
        )
        if self.admission is not None:
            try:
                await self.admission(install)
            except Conflict as exc:  # a spend cap: no model call, the run ends failed
                refused = TeamResult("failed", None, root_key, 0, 0, [], exc.message)
                if await self._end(install, run, refused):
                    await self.run_events.finish(install_id, run_id, refused)
                return {**failed_outcome(run_id, exc.message), "conflict": exc.message, "extra": exc.extra}
        result, pause = await self._team(install, definition, root_key, run)
        if pause is not None:
            if not await ledger.pause(
                self.store, run_id, self.incarnation, pause, result.input_tokens, result.output_tokens
            ):
                return failed_outcome(run_id, SUPERSEDED)
            tracing.gate_paused(pause["gate"], pause.get("fromStep"))  # tracing (#33)
            await self.run_events.finish(install_id, run_id, result, pause)
            outcome = {**outcome_of(run_id, result), "pausedAtGate": pause["gate"]}
            if run.get("callbackUrl"):
                await self.callback(install, run["callbackUrl"], outcome)
            return outcome
        if not await self._end(install, run, result):
            return failed_outcome(run_id, SUPERSEDED)
        await self.run_events.finish(install_id, run_id, result)
        outcome = outcome_of(run_id, result)
        if run.get("callbackUrl"):
            await self.callback(install, run["callbackUrl"], outcome)
        return outcome

    async def _team(
        self, install: Document, definition: dict[str, Any], root_key: str, run: Document
    ) -> tuple[TeamResult, dict[str, Any] | None]:
        """Run the team (one agent, the pipeline from where it stopped, or the whole team)."""
        run_id = run["_id"]
        scope = RunScope(
            install["_id"], run_id, await self.secrets_of(install), self.allow_private, self.judge_model
        )

        async def write_step(step: AgentStep) -> None:
            await self._write_step(install, run_id, step)

        def started(step: AgentStep) -> None:
            self.current_steps[run_id] = step

        state = run.get("state")  # a resumed pipeline carries on from its gate
        payload = {
            "task": run.get("task") or "",
            "bypassGates": bool(run.get("bypassGates")),
            **({k: state[k] for k in ("input", "fromStep", "inputTokens", "outputTokens")} if state else {}),
        }
        # The per-run token cap (spend caps) counts what a continued run used before its gate too.
        before = int(payload.get("inputTokens") or 0) + int(payload.get("outputTokens") or 0)
        runner = TeamRunner(
            self.llm,
            self.security_log,
            write_step,
            started,
            events=self.run_events.open(install["_id"], run_id, root_key, payload, run.get("source")),
            token_cap=(install.get("limits") or {}).get("runTokenCap"),
            tokens_used=before,
        )
        try:
            if run.get("runAgent"):
                agent = next(a for a in definition["agents"] if a["key"] == run["runAgent"])
                result, pause = await runner.run_agent(scope, agent, payload["task"]), None
            elif definition.get("gates"):
                result, pause = await self.pipelines.run(install, definition, scope, runner, payload)
            else:
                result, pause = await runner.run_team(scope, definition, payload["task"]), None
            # Stopped by its token cap: failed, but its tokens are billed as usage (spend caps).
            result.billable = runner.capped and result.status == "failed"
            return result, pause
        except PyMongoError as exc:
            log.error("database error during a run: %s", type(exc).__name__)
            return TeamResult("failed", None, root_key, 0, 0, [], DATABASE_DOWN), None
        except Exception as exc:  # a bug must end the run visibly, not leave it running
            log.error("run failed unexpectedly: %s", type(exc).__name__)
            return TeamResult(
                "failed", None, root_key, 0, 0, [], f"Internal error ({type(exc).__name__})"
            ), None
        except asyncio.CancelledError:
            # cancel-run: the step in progress ends as cancelled and the run as failed.
            step = self.current_steps.get(run_id)
            if step is not None:
                step.status, step.error, step.ended_at = "failed", CANCELLED, utcnow()
                await self._write_step(install, run_id, step, event="step_cancelled")
            return TeamResult("failed", None, root_key, 0, 0, [], CANCELLED), None
        finally:
            self.current_steps.pop(run_id, None)

    async def abort(self, install_id: str, run_id: str, message: str) -> bool:
        """End a run this copy was about to start or was running (cancelled before its team ran):
        queued -> failed, or running under this incarnation -> failed; with its run record."""
        run = await ledger.fail_queued(self.store, run_id, message)
        if run is None:
            run = await ledger.finish(self.store, run_id, self.incarnation, "failed", 0, 0, message)
        if run is None:
            return False
        install = await self.store.installs.find_one({"_id": install_id})
        event: EventType = "step_cancelled" if message == CANCELLED else "step_failed"
        await self._recorded(install, run, "failed", 0, 0, message, step_event=event)
        return True

    async def expire(self, run: Document, message: str) -> bool:
        """A queued run that could never be handed over ends failed, recorded and reported."""
        failed = await ledger.fail_queued(self.store, run["_id"], message)
        if failed is None:
            return False
        install = await self.store.installs.find_one({"_id": run["installId"]})
        await self._recorded(install, failed, "failed", 0, 0, message, step_event="step_failed")
        if install is not None and failed.get("callbackUrl"):
            await self.callback(install, failed["callbackUrl"], failed_outcome(run["_id"], message))
        return True

    async def outcome_now(self, run_id: str) -> dict[str, Any]:
        """The answer for a run this call did not run (a repeated start): what the ledger says."""
        run = await self.store[ledger.RUNS].find_one({"_id": run_id})
        if run is None:
            return failed_outcome(run_id, "Run not found")
        outcome = {
            "runId": run_id,
            "status": run["status"],
            "response": run.get("response"),
            "agent": run.get("agentKey"),
            "inputTokens": run.get("inputTokens") or 0,
            "outputTokens": run.get("outputTokens") or 0,
        }
        if run.get("errorMessage"):
            outcome["errorMessage"] = run["errorMessage"]
        if "refused" in run:  # the same answer as the call that refused it (a 409 or 404 to a sync caller)
            outcome["refused"] = run["refused"]
        return outcome

    async def _refused(self, install: Document | None, run_id: str) -> dict[str, Any]:
        """A run handed over after its install stopped being ready ends failed, marked `refused`."""
        message = (
            "Install not found" if install is None else f"Install is not ready (status: {install['status']})"
        )
        # Claimed by this copy a moment ago: it ends failed, with no run record (it never ran).
        refused = install is not None
        await ledger.finish(self.store, run_id, self.incarnation, "failed", 0, 0, message, refused=refused)
        return {**failed_outcome(run_id, message), "refused": refused}

    async def secrets_of(self, install: Document) -> dict[str, str]:
        """Org secrets, overridden by the install's own of the same name (spec)."""
        values: dict[str, str] = {}
        owner = install.get("owner") or {}
        if owner.get("kind") == "org":
            async for doc in self.store["org_secrets"].find({"orgId": owner["id"]}):
                values[doc["key"]] = self.vault.decrypt(doc["valueEncrypted"])
        for name, token in (install.get("secretsEncrypted") or {}).items():
            values[name] = self.vault.decrypt(token)
        return values

    async def _write_step(
        self, install: Document, run_id: str, step: AgentStep, event: EventType | None = None
    ) -> None:
        """Store an agent's step and its event (step_completed, step_failed or step_cancelled).

        The two writes (two collections, so two round trips) go out together: the step waits for
        one round trip, not two, and both are stored before the run goes on (persist, then act)."""
        duration = int(((step.ended_at or utcnow()) - step.started_at).total_seconds() * 1000)
        kind: EventType = event or ("step_completed" if step.status == "completed" else "step_failed")
        record = self.store["agent_runs"].insert_one(
            {
                "_id": tokens.new_id(),
                "installId": install["_id"],
                "runId": run_id,
                "agentKey": step.agent_key,
                "status": step.status,
                "inputTokens": step.input_tokens,
                "outputTokens": step.output_tokens,
                "errorMessage": step.error,
                "durationMs": duration,
                "startedAt": step.started_at,
                "createdAt": step.ended_at or utcnow(),
            }
        )
        emitted = self.events.emit(install["_id"], kind, step_key=step.agent_key, meta={"runId": run_id})
        await asyncio.gather(record, emitted)

    def cancel_step(self, run_id: str) -> str | None:
        """The key of the step a run is in (None when it is not running here)."""
        step = self.current_steps.get(run_id)
        return step.agent_key if step is not None else None

    async def _end(self, install: Document, run: Document, result: TeamResult) -> bool:
        """running -> completed/failed (fenced by this incarnation) and its run record; False when
        another writer had settled the run (this copy was superseded): nothing is recorded."""
        finished = await ledger.finish(
            self.store,
            run["_id"],
            self.incarnation,
            result.status,
            result.input_tokens,
            result.output_tokens,
            result.error,
            result.agent,
            seen=run,
        )
        if finished is None:
            return False
        await self._recorded(
            install,
            finished,
            result.status,
            result.input_tokens,
            result.output_tokens,
            result.error,
            billable=result.billable,
        )
        await self._traced_end(install, result)  # tracing (#33)
        return True

    async def _traced_end(self, install: Document, result: TeamResult) -> None:
        """The run span's outcome, tokens and billed amount (one template read, only when traced)."""
        tracing.run_finished(result.status, result.input_tokens, result.output_tokens, result.error)
        if self.costing is not None and tracing.enabled():
            tokens = result.input_tokens + result.output_tokens
            completed = result.status == "completed"
            model, price, amount = await self.costing(install, completed, result.billable, tokens)
            tracing.run_billed(model, amount, price)

    async def _recorded(
        self,
        install: Document | None,
        run: Document,
        status: str,
        input_tokens: int,
        output_tokens: int,
        error: str | None,
        step_event: EventType | None = None,
        billable: bool = False,
    ) -> None:
        """The run record (the run list, counters, billing), lastRunAt and the schedule's count.

        Independent writes to different collections, sent together: the run waits for the slowest
        (the run record's group), not for their sum; all are stored before the run answers."""
        if install is None:
            return
        writes: list[Awaitable[Any]] = []
        if step_event:  # a run settled from outside has no step record of its own end (the run log)
            writes.append(
                self.events.emit(
                    install["_id"], step_event, step_key=run.get("agentKey"), meta={"runId": run["_id"]}
                )
            )
        writes.append(
            self.runs.record(
                install,
                agent_key=run.get("agentKey"),
                status=status,  # type: ignore[arg-type]
                source=run.get("source") or "run",
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                error_message=error,
                run_id=run["_id"],
                platform_agent_id=run.get("platformAgentId"),
                platform_run_id=run.get("platformRunId"),
                billable=billable,
                started_at=run.get("startedAt"),
            )
        )
        writes.append(touch_last_run(self.store, install["_id"]))
        if run.get("source") == "schedule":
            writes.append(note_scheduled_outcome(self.store, install["_id"], status == "completed", error))
        await asyncio.gather(*writes)

    async def callback(self, install: Document, url: str, outcome: dict[str, Any]) -> bool:
        """Store the callback and make its first attempt; the job runner retries it durably
        (svc/runtime/callbacks.py). True when the first attempt delivered it."""
        return await self.callbacks.deliver(install, url, outcome)


def failed_outcome(run_id: str, message: str) -> dict[str, Any]:
    """The run response of a run that ended before producing anything."""
    return {
        "runId": run_id,
        "status": "failed",
        "response": None,
        "agent": None,
        "inputTokens": 0,
        "outputTokens": 0,
        "errorMessage": message,
    }


def outcome_of(run_id: str, result: TeamResult) -> dict[str, Any]:
    """The spec's run response."""
    outcome: dict[str, Any] = {
        "runId": run_id,
        "status": result.status,
        "response": result.response,
        "agent": result.agent,
        "inputTokens": result.input_tokens,
        "outputTokens": result.output_tokens,
    }
    if result.error:
        outcome["errorMessage"] = result.error
    return outcome
