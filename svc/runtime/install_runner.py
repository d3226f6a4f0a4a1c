"""Executing one run of a managed install, inside the install's actor.

`InstallRunner.execute` claims a queued run in the ledger (or carries on one resumed after a gate,
or adopted after a crash), reads the install, runs the team through the run's recorder (one write
per step, svc/runtime/journal.py), and ends or pauses it in ONE write that also lists what it owes;
the settlement then pays that in one batch (svc/runtime/settlement.py) before the answer goes out.
A run stopped from outside (cancelled while queued, refused, never handed over, interrupted,
stalled) ends the same way: one write with what it owes, then its settlement.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from bson import ObjectId
from pymongo.errors import PyMongoError

from plugins import tracing
from svc.core import Document, Mailer, NotFound, OrgLookups, RunOutcome, Store, Vault, new_id, utcnow
from svc.installs import find_install, run_definition
from svc.runtime import ledger, run_traces
from svc.runtime.agent_loop import CANCELLED, GateReached, RunScope, TeamRunner, root_agent
from svc.runtime.eval_runs import eval_install
from svc.runtime.faults import CrashPoints
from svc.runtime.journal import ReplayMismatch, RunRecorder, RunTaken
from svc.runtime.ledger import NOT_STARTED
from svc.runtime.llm import LLM
from svc.runtime.mcp_run import McpService
from svc.runtime.pipeline_events import Events
from svc.runtime.pipelines import PipelineExecutor
from svc.runtime.settlement import Settlement, owed_on_end, owed_on_pause
from svc.runtime.steps import TeamResult, failed, tokens_by_agent

log = logging.getLogger(__name__)

INTERRUPTED = "Interrupted: the install's worker stopped during the run; start it again"
SUPERSEDED = "Superseded: a newer copy of the install's worker took the run over"
DATABASE_DOWN = "Database unavailable during the run"
STALLED = "The run made no progress for too long and was ended"
# How the errors begin of a run that failed for the runtime's reasons, not the team's (an eval
# case that ends so is an error, not a failure: svc/evals). One place, beside the messages.
RUNTIME_FAILURES = (
    "Model provider error",  # agent_loop.py
    DATABASE_DOWN.removesuffix(" during the run"),
    INTERRUPTED.split(":")[0],
    SUPERSEDED.split(":")[0],
    NOT_STARTED.removesuffix(" could not be started"),  # not started, or stopped (actors/)
    "The recording cannot answer",  # a replay (journal.py, agent_loop.py)
    "Cannot resume the run",
    "Internal error",
)
Mode = Literal["start", "resume", "adopt"]
# Spend caps (svc/billing/spend_caps.py): asked before every model call of a run with the install
# and the tokens so far of each other run in flight; a Conflict refuses the call.
Admission = Callable[[Document, Sequence[int]], Awaitable[None]]
# What the run asks before each model call (the host binds it to the runs it holds).
Admit = Callable[[Document], Awaitable[None]]


@dataclass(frozen=True)
class RunLimits:
    """What bounds a run, from settings."""

    judge_model: str
    allow_private: bool
    max_resumes: int = 2
    crash: CrashPoints = field(default_factory=CrashPoints)


class InstallRunner:
    """Runs one install's runs; lives in the install's actor, which owns them.

    Every status change goes through the ledger stamped with this runner's incarnation, so a copy
    a newer one superseded can neither step, pause nor end a run.
    """

    def __init__(
        self,
        store: Store,
        vault: Vault,
        llm: LLM,
        settlement: Settlement,
        limits: RunLimits,
        mailer: Mailer | None = None,
        admission: Admission | None = None,
        mcp: McpService | None = None,
        costing: run_traces.Costing | None = None,
        *,
        orgs: OrgLookups,
    ) -> None:
        self.store = store
        self.orgs = orgs  # an org install's org secrets (svc/wiring.py hands in the orgs' answer)
        self.costing = costing  # the billed amount on the run's span (tracing, #33)
        self.vault = vault
        self.llm = llm
        self.settlement = settlement
        self.limits = limits
        self.pipelines = PipelineExecutor(store, mailer or Mailer(store))
        self.events = Events(store)
        self.admission = admission
        # MCP (issue 32): the tools of a team's MCP servers, connections pooled per actor.
        self.mcp = mcp
        # This runner's incarnation: every run it claims is stamped with it.
        self.incarnation = new_id()

    # ---- one run --------------------------------------------------------------------------------

    async def execute(
        self,
        run: Document,
        mode: Mode,
        publish: Callable[[list[dict[str, Any]]], None],
        on_recorder: Callable[[RunRecorder], None] = lambda recorder: None,
        admit: Admit | None = None,
    ) -> RunOutcome:
        """Run `run` to its end or its next gate; the outcome. `mode`: `start` claims a queued run
        (idempotent: a run no longer queued is not run again), `resume` carries on a run continued
        after a gate, `adopt` one an earlier copy of the actor was running when it died."""
        run_id = run["_id"]
        if mode == "start":
            self.limits.crash.reached("before-claim")  # a test hook (svc/runtime/faults.py)
            if not await ledger.claim(self.store, run_id, self.incarnation, []):
                return await self.outcome_now(run_id)
            run = {**run, "status": "running", "incarnation": self.incarnation, "startedAt": utcnow()}
        with run_traces.run_span(run, mode):  # in the trace of whoever asked for the run (tracing, #33)
            # Written first (the claim), read second: a cancellation of the install that answered
            # before this read is seen, so no run starts after it has answered (docs/consistency.md).
            install = eval_install(run) or await find_install(self.store, run["installId"])
            if install is None or install["status"] != "completed":
                return await self._refused(run, install)
            run_traces.started(install)  # tracing (#33)
            version = run.get("templateVersion") or install.get("templateVersion")
            run = {**run, "templateVersion": version}
            try:
                recorder = RunRecorder.for_run(
                    self.store, run, self.incarnation, publish, resumed=mode == "adopt"
                )
            except ReplayMismatch as exc:  # a journal it cannot read: the run ends, clearly, here
                recorder = RunRecorder.for_run(self.store, {**run, "journal": []}, self.incarnation, publish)
                return await self._end(install, run, recorder, failed(str(exc)))
            recorder.crash = self.limits.crash
            on_recorder(recorder)
            try:
                # Issue 34: the version the run carries (svc/installs/versions.py): a run queued
                # before an upgrade, or paused across one, finishes on its version.
                try:
                    definition = await run_definition(self.store, install, version)
                except NotFound as exc:  # that version is stored nowhere any more: it ends, clearly
                    raise ReplayMismatch(f"Cannot run: {exc.message}") from None
                root = root_agent(definition)
                if mode == "start":
                    recorder.emit(
                        "run_started",
                        {"source": run.get("source") or "run", "agent": root["key"], "task": run.get("task")},
                    )
                result, pause = await self._team(install, definition, run, recorder, admit)
                if result.refusal is not None and recorder.totals.input + recorder.totals.output == 0:
                    # The spend cap refused the run's first model call: nothing ran (a 409 to a caller).
                    ended = await self._end(install, run, recorder, result)
                    return replace(ended, conflict=result.refusal.message, extra=result.refusal.extra)
            except RunTaken:
                return await self.outcome_now(run_id)
            except ReplayMismatch as exc:
                result, pause = failed(str(exc)), None
            except GateReached as gate:
                result, pause = (
                    TeamResult("paused", None, gate.call.get("agent") or "", 0, 0, []),
                    gate_state(gate),
                )
            except asyncio.CancelledError:
                result, pause = failed(CANCELLED), None
                return await asyncio.shield(self._end(install, run, recorder, result))
            except PyMongoError as exc:
                log.error("database error during a run: %s", type(exc).__name__)
                result, pause = failed(DATABASE_DOWN), None
            if pause is not None:
                return await self._pause(install, run, recorder, result, pause)
            return await self._end(install, run, recorder, result)

    async def _team(
        self,
        install: Document,
        definition: dict[str, Any],
        run: Document,
        recorder: RunRecorder,
        admit: Admit | None,
    ) -> tuple[TeamResult, dict[str, Any] | None]:
        """Run the team (one agent, the pipeline from where it stopped, or the whole team)."""
        scope = RunScope(
            install["_id"],
            run["_id"],
            await self.secrets_of(install),
            self.limits.allow_private,
            self.limits.judge_model,
        )
        if admit is None and self.admission is not None:
            admission = self.admission

            async def admit(install: Document) -> None:
                await admission(install, ())

        bound = (lambda: admit(install)) if admit is not None else None
        mcp = (
            self.mcp.for_install(install, run["_id"], scope.secrets, definition)
            if self.mcp is not None and definition.get("mcpServers")
            else None
        )
        runner = TeamRunner(
            self.llm,
            recorder,
            admit=bound,
            token_cap=(install.get("limits") or {}).get("runTokenCap"),
            mcp=mcp,
        )
        try:
            return await self._run_team(install, definition, run, scope, runner)
        finally:
            if mcp is not None:  # what the run listed and opened ends with it
                await mcp.aclose()

    async def _run_team(
        self,
        install: Document,
        definition: dict[str, Any],
        run: Document,
        scope: RunScope,
        runner: TeamRunner,
    ) -> tuple[TeamResult, dict[str, Any] | None]:
        state = run.get("state") or {}
        payload = {
            "task": run.get("task") or "",
            "bypassGates": bool(run.get("bypassGates")),
            **({k: state[k] for k in ("input", "fromStep") if k in state}),
        }
        if run.get("runAgent"):
            agent = next(a for a in definition["agents"] if a["key"] == run["runAgent"])
            result, pause = await runner.run_agent(scope, agent, payload["task"]), None
        elif definition.get("gates"):
            result, pause = await self.pipelines.run(install, definition, scope, runner, payload)
        else:
            result, pause = await runner.run_team(scope, definition, payload["task"]), None
        # Stopped by its token cap: failed, but its tokens are billed as usage (spend caps).
        result.billable = runner.capped and result.status == "failed"
        result.refusal = runner.refusal if result.status == "failed" else None
        return result, pause

    # ---- how a run stops ------------------------------------------------------------------------

    async def _end(
        self, install: Document, run: Document, recorder: RunRecorder, result: TeamResult
    ) -> RunOutcome:
        """running -> completed/failed in one write (the last step, the end, what it owes), then
        its settlement; the outcome. Superseded meanwhile: what the ledger says instead."""
        entries, events, tokens_in, tokens_out = recorder.take()
        totals = recorder.totals
        end = {
            "status": result.status,
            "inputTokens": totals.input,
            "outputTokens": totals.output,
            "agent": result.agent,
            "error": result.error,
            "response": result.response,
        }
        events.append(ledger.event(result.status, end))
        fields = {
            "response": result.response,
            "errorMessage": result.error,
            "agentKey": result.agent,
            "billable": result.billable,
            "templateVersion": run.get("templateVersion"),
            "tokensByAgent": tokens_by_agent(recorder.log),
        }
        owed = owed_on_end(run)
        self.limits.crash.reached("before-end")
        ended = await ledger.end(
            self.store,
            run["_id"],
            self.incarnation,
            status=result.status,
            fields=fields,
            journal=entries,
            events=events,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            owed=owed,
        )
        if not ended:
            return await self.outcome_now(run["_id"])
        self.limits.crash.reached("after-end")
        recorder.stored(events)
        await run_traces.ended(self.costing, install, result, totals.input, totals.output)  # tracing (#33)
        final = {
            **run,
            **fields,
            "status": result.status,
            "endedAt": utcnow(),
            "owed": owed,
            "inputTokens": totals.input,
            "outputTokens": totals.output,
            "journal": recorder.log,
            "seq": recorder.seq,
        }
        await self._settle(final, install)
        return ledger.outcome(final)

    async def _pause(
        self, install: Document, run: Document, recorder: RunRecorder, result: TeamResult, state: Document
    ) -> RunOutcome:
        """running -> paused at a gate in one write, with the state to resume from."""
        entries, events, tokens_in, tokens_out = recorder.take()
        totals = recorder.totals
        paused = {
            "status": "paused",
            "gate": state["gate"],
            "inputTokens": totals.input,
            "outputTokens": totals.output,
        }
        events.append(ledger.event("paused", paused))
        owed = owed_on_pause(run)
        state = {**state, "templateVersion": run.get("templateVersion"), "eventId": str(ObjectId())}
        done = await ledger.pause(
            self.store,
            run["_id"],
            self.incarnation,
            gate=state["gate"],
            state=state,
            journal=entries,
            events=events,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            owed=owed,
        )
        if not done:
            return await self.outcome_now(run["_id"])
        tracing.gate_paused(state["gate"], state.get("fromStep"))  # tracing (#33)
        recorder.stored(events)
        final = {
            **run,
            "status": "paused",
            "pausedAtGate": state["gate"],
            "state": state,
            "owed": owed,
            "inputTokens": totals.input,
            "outputTokens": totals.output,
            "agentKey": result.agent,
            "journal": recorder.log,
            "seq": recorder.seq,
        }
        await self._settle(final, install)
        return ledger.outcome(final)

    async def _refused(self, run: Document, install: Document | None) -> RunOutcome:
        """A run handed over after its install stopped being ready ends failed, marked `refused`
        (no run record: it never ran); every later command for it gets the same answer."""
        message = (
            "Install not found" if install is None else f"Install is not ready (status: {install['status']})"
        )
        refused = install is not None
        events = [
            ledger.event(
                "failed", {"status": "failed", "error": message, "inputTokens": 0, "outputTokens": 0}
            )
        ]
        await ledger.end(
            self.store,
            run["_id"],
            self.incarnation,
            status="failed",
            fields={"errorMessage": message, "refused": refused},
            journal=[],
            events=events,
            tokens_in=0,
            tokens_out=0,
            owed=[],
        )
        return RunOutcome(run["_id"], "failed", errorMessage=message, refused=refused)

    async def stop(self, run_id: str, message: str, event: str = "step_failed", paused: bool = False) -> bool:
        """End a run that is not running here: queued -> failed (cancelled before it started, never
        handed over), with what it owes; False when it was not queued. `paused`: a paused run
        too (an eval run whose case is judged)."""
        run = await ledger.get(self.store, run_id)
        if run is None:
            return False
        waiting = ("queued", "paused") if paused else ("queued",)
        final = await ledger.fail_queued(
            self.store, run_id, message, owed_on_end(run), [stopped(message)], {"endEvent": event}, waiting
        )
        if final is None:
            return False
        await self._settle_stored(run_id)
        return True

    async def cancel_before_team(self, run_id: str) -> RunOutcome:
        """A run cancelled before its team ran here (waiting for a slot, or being claimed) ends
        failed as cancelled, with what it owes: queued, or claimed by this copy."""
        if not await self.stop(run_id, CANCELLED, event="step_cancelled"):
            run = await ledger.get(self.store, run_id)
            if run is not None and run["status"] == "running" and run.get("incarnation") == self.incarnation:
                ended = await ledger.end(
                    self.store,
                    run_id,
                    self.incarnation,
                    status="failed",
                    fields={"errorMessage": CANCELLED, "endEvent": "step_cancelled"},
                    journal=[],
                    events=[stopped(CANCELLED, run)],
                    tokens_in=0,
                    tokens_out=0,
                    owed=owed_on_end(run),
                )
                if ended:
                    await self._settle_stored(run_id)
        return await self.outcome_now(run_id)

    async def emit_gate_approved(self, run: Document, actor: dict[str, Any]) -> None:
        """The console's feed: a person let the run past its gate."""
        gate = (run.get("state") or {}).get("gate")
        await self.events.emit(
            run["installId"], "gate_approved", gate_name=gate, meta={"runId": run["_id"]}, **actor
        )

    async def settle_gone(self, run: Document, message: str) -> bool:
        """End a claimed run whose worker is gone (or that stalled) as failed, with what it owes:
        its tokens stay what its steps recorded. Conditional on the run as seen."""
        owed = owed_on_end(run)
        fields = {"endEvent": "step_failed", "tokensByAgent": tokens_by_agent(run.get("journal") or [])}
        if not await ledger.settle(self.store, run, message, owed, [stopped(message, run)], fields):
            return False
        await self._settle_stored(run["_id"])
        return True

    async def _settle_stored(self, run_id: str) -> None:
        """Pay what a run ended from outside its team owes (read back: it was not in memory)."""
        try:
            await self.settlement.finish(run_id)
        except Exception as exc:
            log.warning("run %s still owes its settlement: %s", run_id, type(exc).__name__)

    async def _settle(self, run: Document, install: Document | None) -> None:
        """Pay what the run owes now; on failure it keeps owing (the actor's next beat, its
        recovery or the sweeper pays it) and the answer goes out all the same."""
        try:
            await self.settlement.settle(run, install)
        except Exception as exc:
            log.warning("run %s still owes %s: %s", run["_id"], run.get("owed"), type(exc).__name__)
            return
        self.limits.crash.reached("after-settlement")

    async def outcome_now(self, run_id: str) -> RunOutcome:
        """The answer for a run this call did not run (a repeated start): what the ledger says."""
        run = await ledger.get(self.store, run_id)
        if run is None:
            return RunOutcome(run_id, "failed", errorMessage="Run not found")
        return ledger.outcome(run)

    async def secrets_of(self, install: Document) -> dict[str, str]:
        """Org secrets, overridden by the install's own of the same name (spec)."""
        values: dict[str, str] = {}
        owner = install.get("owner") or {}
        if owner.get("kind") == "org":
            values.update(await self.orgs.secret_values(owner["id"]))
        for name, token in (install.get("secretsEncrypted") or {}).items():
            values[name] = self.vault.decrypt(token)
        return values


def stopped(message: str, run: Document | None = None) -> Document:
    """The last event of a run settled from outside its team."""
    tokens_in = int((run or {}).get("inputTokens") or 0)
    tokens_out = int((run or {}).get("outputTokens") or 0)
    return ledger.event(
        "failed", {"status": "failed", "error": message, "inputTokens": tokens_in, "outputTokens": tokens_out}
    )


def gate_state(gate: GateReached) -> Document:
    """What a run paused at a tool call resumes from: the same step, replayed from its journal
    (a pipeline's step says which: `gate.resume`)."""
    return {
        "gate": gate.gate,
        "kind": "tool",
        "call": gate.call,
        "stepKey": gate.call.get("agent"),
        **gate.resume,
    }
