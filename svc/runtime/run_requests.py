"""Asking for runs of managed installs, on the API side (sync runs, webhook triggers, heartbeats,
retries, continue and cancel): `RunService` checks the caller and the install, has the queued run
stored and handed to the install's actor (`HandOver`, svc/runtime/handover.py), the only writer of a run's
status (svc/runtime/install_runner.py, actors/install_actor.py), and asks that actor to continue
or cancel.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import httpx
from pydantic import Field

from svc.core import (
    BadGateway,
    BadRequest,
    Cancel,
    Conflict,
    Continue,
    Document,
    NotFound,
    RequestBody,
    RunOutcome,
    Runtime,
    RuntimeFailure,
    Store,
    Timeline,
    actor_of,
    utcnow,
)
from svc.identity import Principal
from svc.installs import Installs, find_install
from svc.runs import require_ready
from svc.runtime import ledger
from svc.runtime.handover import HandOver
from svc.runtime.outreach_review import Outreach

log = logging.getLogger(__name__)


class RunBody(RequestBody):
    """POST /api/installs/:installId/run."""

    task: str = Field(min_length=1, max_length=100_000)
    # False: answer 202 {runId, status: "queued"} at once; the run goes on in the install's actor.
    wait: bool = True


class WebhookBody(RequestBody):
    """POST /api/webhook/:token."""

    inputText: str | None = Field(default=None, max_length=100_000)
    callbackUrl: str | None = Field(default=None, max_length=2048)


class RunService:
    """Starts runs from the API (sync runs, webhook triggers, orchA heartbeats)."""

    def __init__(
        self,
        store: Store,
        installs: Installs,
        runtime: Runtime | None,
        outreach: Outreach,
        admission: Callable[[Document], Awaitable[None]] | None = None,
        wait_s: float = 300.0,
    ) -> None:
        self.store = store
        self.installs = installs
        self.runtime = runtime
        self.outreach = outreach
        self.admission = admission
        # A synchronous caller waits this long at most (SVC_RUN_WAIT_SECONDS).
        self.wait_s = wait_s
        self.handover = HandOver(store, runtime)

    async def approve_draft(
        self, principal: Principal, install_id: str, draft_id: int, actor: dict[str, Any]
    ) -> None:
        """Approve a draft; the pipeline paused at draft approval resumes once no draft awaits a
        decision (the API and the dashboard alike)."""
        await self.outreach.approve(principal, install_id, draft_id, actor)
        if await self.outreach.pending_drafts(install_id):
            return
        paused = await ledger.paused_at(self.store, install_id, "draft-approval")
        if paused is None:
            return
        try:
            await self.continue_run(principal, install_id, False, actor, paused["_id"])
        except Conflict:
            pass  # someone continued it first; the approval itself stands

    async def run(self, principal: Principal, install_id: str, body: RunBody) -> dict[str, Any]:
        """A run: answers when the team has finished, or at once (`wait: false`) with the queued run."""
        install = await self.installs.owned(principal, install_id)
        if not self.installs.traits(install["platform"]).managed:
            raise BadRequest(f"run is for managed (svc) installs; this install is on {install['platform']}")
        require_ready(install)
        await self._admit(install)
        run = ledger.new_run(  # issue 34: pinned to the install's version
            install_id, body.task, "run", handoffAt=utcnow(), templateVersion=install["templateVersion"]
        )
        outcome = await self.handover.start(run, self.wait_s if body.wait else None)
        if not body.wait:
            return {"runId": outcome.runId, "status": outcome.status}
        if outcome.conflict is not None:
            raise Conflict(outcome.conflict, **(outcome.extra or {}))
        if outcome.refused is not None:  # cancelled since the check above: the answer a later call gets
            raise Conflict(outcome.errorMessage or "") if outcome.refused else NotFound("Install not found")
        return outcome.wire()

    async def trigger(self, install_id: str, body: WebhookBody) -> dict[str, Any]:
        """Queue a run from the webhook; the result goes to `callbackUrl` when given."""
        install = await find_install(self.store, install_id)
        if install is None:
            raise NotFound("Webhook token not found")
        require_ready(install)
        if body.callbackUrl is not None:
            try:
                parsed = httpx.URL(body.callbackUrl)
            except (httpx.InvalidURL, ValueError):
                parsed = None
            if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
                raise BadRequest("callbackUrl: must be an http(s) URL")
        await self._admit(install)
        run = ledger.new_run(
            install_id,
            body.inputText or "",
            "webhook",
            callbackUrl=body.callbackUrl,
            handoffAt=utcnow(),
            templateVersion=install["templateVersion"],  # issue 34: pinned runs
        )
        outcome = await self.handover.start(run, None)
        return {"runId": outcome.runId, "status": outcome.status}

    async def retry(self, principal: Principal, install_id: str, run_id: str) -> dict[str, Any]:
        """A new run with the first one's input, the install's current variables and pinned version,
        linked by `retryOf` (409 while the first is still active; 404 for a run not of this install)."""
        install = await self.installs.owned(principal, install_id)
        first = await ledger.get(self.store, run_id)
        if first is None or first["installId"] != install_id:
            raise NotFound("Run not found")
        if first["status"] in (*ledger.ACTIVE, "paused"):
            raise Conflict(f"Run is still active (status: {first['status']})")
        if first.get("lastRetry"):  # a retry asked for again while the last one is active: that one
            last = await ledger.get(self.store, first["lastRetry"])
            if last is not None and last["status"] in (*ledger.ACTIVE, "paused"):
                return {"runId": last["_id"], "status": last["status"], "retryOf": run_id}
        require_ready(install)
        await self._admit(install)
        run = ledger.new_run(
            install_id,
            first.get("task") or "",
            "retry",
            retryOf=run_id,
            callbackUrl=first.get("callbackUrl"),
            bypassGates=bool(first.get("bypassGates")),
            runAgent=first.get("runAgent"),
            handoffAt=utcnow(),
            templateVersion=install["templateVersion"],  # issue 34: pinned runs
        )
        # Two retries at once give one new run: the loser answers with the winner's.
        queued, mine = await ledger.retry(self.store, first, run)
        if mine:
            self.handover.later(queued)
        return {"runId": queued["_id"], "status": queued["status"], "retryOf": run_id}

    async def heartbeat(self, body: HeartbeatBody, secret: str | None) -> dict[str, Any]:
        """Run one orchA `http` agent for a heartbeat; answers in the deployer-webhook shape."""
        # Upstream agent ids come from each deployer's own server, so they may repeat across
        # installs: the install is the one whose secret the caller presents.
        heartbeats = self.installs.heartbeats
        install = await heartbeats.install(body.agentId, secret)
        agent = next(a for a in install["deployedAgents"] if a["externalId"] == body.agentId)
        beat = heartbeats.context(install, agent["key"], body.agentId, body.model_dump())
        read = await heartbeats.task(beat)
        context = body.context or {}
        task = (
            (read.task if read else "")
            or str(context.get("task") or context.get("prompt") or "")
            or (
                f"Heartbeat from the orchestrator (wake reason: {context.get('wakeReason') or 'scheduled'}; "
                f"task id: {context.get('taskId') or 'none'}). Do your work for this wake-up and report."
            )
        )
        run = ledger.new_run(
            install["_id"],
            task,
            "heartbeat",
            runAgent=agent["key"],
            platformAgentId=body.agentId,
            platformRunId=(read.platform_run_id if read else None) or body.runId,
            platformTaskId=(read.platform_task_id if read else None) or context.get("taskId"),
            handoffAt=utcnow(),
            templateVersion=install["templateVersion"],  # issue 34: pinned runs
        )
        await self._admit(install)
        ran = await self.handover.start(run, self.wait_s)
        if ran.conflict is not None:
            raise Conflict(ran.conflict, **(ran.extra or {}))
        outcome = ran.wire()
        try:
            problems = await heartbeats.finished(replace(beat, outcome=outcome))
        except Exception as exc:  # a write-back failure must not hide the run's own outcome
            problems = [f"write-back raised {type(exc).__name__}"]
        for problem in problems:
            log.warning("heartbeat write-back: %s", problem, extra={"installId": install["_id"]})
        if outcome.get("status") != "completed":
            # Paperclip's http adapter counts any 2xx as success: a failed run must not be one.
            raise BadGateway(
                f"The run failed: {outcome.get('errorMessage') or 'no detail'}",
                runId=body.runId,
                agentId=body.agentId,
                status="failed",
            )
        return {
            "runId": body.runId,
            "agentId": body.agentId,
            "companyId": body.companyId,
            "agentName": agent["name"],
            "response": outcome.get("response"),
        }

    async def continue_run(
        self,
        principal: Principal,
        install_id: str,
        bypass_gates: bool,
        actor: dict[str, Any],
        run_id: str | None = None,
        decision: str | None = None,
        note: str | None = None,
    ) -> dict[str, Any]:
        """Ask the install's actor to resume the paused run (the oldest, or `run_id`) from its gate;
        the actor decides from what it holds (409 when none is paused, or when a gate at a tool call
        needs a `decision` it did not get)."""
        install = await self.installs.owned(principal, install_id)
        if run_id is not None:
            found = await ledger.get(self.store, run_id)
            if found is None or found["installId"] != install_id:
                raise NotFound("Run not found")
        await self._admit(install)
        if self.runtime is None:
            raise RuntimeFailure("The runtime is not available")
        answer = await self.runtime.resume(install_id, Continue(run_id, bypass_gates, actor, decision, note))
        if answer.conflict is not None:
            raise Conflict(answer.conflict)
        meta = {"runId": answer.runId, "gate": answer.gate, "bypassGates": bypass_gates}
        if decision is not None:
            meta["decision"] = decision
        await Timeline(self.store).record(
            "gate",
            "gate.continue",
            install_id=install_id,
            actor=actor_of(principal.user_id, principal.via),
            meta=meta,
        )
        return {"ok": True}

    async def resume_approval(
        self, principal: Principal, install_id: str, approval_id: str, decision: str, actor: dict[str, Any]
    ) -> bool:
        """Continue the run paused at the tool call this approval request is for, with the person's
        decision (deciding through the approvals route and continuing the run are one act)."""
        paused = await ledger.paused_on_approval(self.store, install_id, approval_id)
        if paused is None:
            return False
        try:
            await self.continue_run(principal, install_id, False, actor, paused["_id"], decision)
        except Conflict:
            return False  # continued meanwhile by someone else
        return True

    async def cancel(self, principal: Principal, install_id: str) -> dict[str, Any]:
        """Cancel the install's active run: {ok, runId, cancelledStep}; 404 when none is active.
        The actor decides: a run it runs is stopped, a queued one never starts."""
        await self.installs.owned(principal, install_id)
        active = await ledger.newest_active(self.store, install_id)
        if active is None or self.runtime is None:
            raise NotFound("No active run for this install")
        answer = await self.runtime.cancel(install_id, Cancel(active["_id"]))
        if not answer.cancelled:
            raise NotFound("No active run for this install")
        return {"ok": True, "runId": active["_id"], "cancelledStep": answer.step or None}

    async def run_eval(self, run: Document) -> RunOutcome:
        """An eval case's run (svc/runtime/eval_runs.py): persisted, run by the builder's eval
        worker on the real runtime, and waited for like a synchronous run."""
        return await self.handover.start(run, self.wait_s)

    async def close_eval_run(self, run: Document) -> bool:
        """End an eval run its case left paused at a gate (judged: nobody continues it), by its
        eval worker, which forgets it; True when it ended. Its `pausedAtGate` stays."""
        if self.runtime is None or run["status"] != "paused":
            return False
        reason = f"Eval case judged at gate {run.get('pausedAtGate')!r}; an eval run is not continued"
        answer = await self.runtime.cancel(run["installId"], Cancel(run["_id"], paused=True, reason=reason))
        return answer.cancelled

    async def _admit(self, install: Document) -> None:
        """The spend-cap check (h-caps) before a run is asked for; a Conflict answers 409."""
        if self.admission is not None:
            await self.admission(install)

    async def close(self) -> None:
        """Let hand-overs in progress end (shut-down); what they miss the job runner hands over."""
        await self.handover.close()


class HeartbeatBody(RequestBody):
    """POST /api/runtime/webhook: the orchestration platform's heartbeat."""

    runId: str = Field(min_length=1, max_length=200)
    agentId: str = Field(min_length=1, max_length=200)
    companyId: str | None = Field(default=None, max_length=200)
    context: dict[str, Any] = Field(default_factory=dict, max_length=100)


class RuntimeTestBody(RequestBody):
    """POST /api/runtime/webhook/test."""

    systemPrompt: str = Field(min_length=1, max_length=100_000)
    task: str = Field(min_length=1, max_length=100_000)
