"""Starting runs of managed installs, on the API side (sync runs, webhook triggers, heartbeats,
continue and cancel): `RunService` checks the caller and the install, then hands the run to the
runtime port. The install's actor executes it (svc/runtime/execution.py).
"""

from __future__ import annotations

import hmac
import logging
from dataclasses import replace
from typing import Any

import httpx
from pydantic import Field

from plugins.types import HeartbeatContext
from svc.core import (
    BadGateway,
    BadRequest,
    Conflict,
    Document,
    NotFound,
    RequestBody,
    Runtime,
    RuntimeBusy,
    RuntimeFailure,
    Store,
    Timeline,
    Unauthorized,
    actor_of,
    tokens,
    utcnow,
)
from svc.identity import Principal
from svc.installs import Installs
from svc.runs import require_ready
from svc.runtime.events import Events
from svc.runtime.execution import CANCELLED, INTERRUPTED, failed_outcome
from svc.runtime.outreach import Outreach

log = logging.getLogger(__name__)


class RunBody(RequestBody):
    """POST /api/installs/:installId/run."""

    task: str = Field(min_length=1, max_length=100_000)


class WebhookBody(RequestBody):
    """POST /api/webhook/:token."""

    inputText: str | None = Field(default=None, max_length=100_000)
    callbackUrl: str | None = Field(default=None, max_length=2048)


class RunService:
    """Starts runs from the API (sync runs, webhook triggers, orchA heartbeats)."""

    def __init__(self, store: Store, installs: Installs, runtime: Runtime | None, outreach: Outreach) -> None:
        self.store = store
        self.installs = installs
        self.runtime = runtime
        self.outreach = outreach

    async def approve_draft(
        self, principal: Principal, install_id: str, draft_id: int, actor: dict[str, Any]
    ) -> None:
        """Approve a draft; the pipeline paused at draft approval resumes once no draft awaits a
        decision (the API and the dashboard alike)."""
        await self.outreach.approve(principal, install_id, draft_id, actor)
        if await self.outreach.pending_drafts(install_id):
            return
        paused = await self.store["pipeline_runs"].find_one(
            {"installId": install_id, "status": "paused", "pausedAtGate": "draft-approval"}
        )
        if paused is None:
            return
        try:
            await self.continue_run(principal, install_id, False, actor, paused["_id"])
        except Conflict:
            pass  # someone continued it first; the approval itself stands

    async def run(self, principal: Principal, install_id: str, body: RunBody) -> dict[str, Any]:
        """A synchronous run: answers when the team has finished."""
        install = await self.installs.owned(principal, install_id)
        if not self.installs.traits(install["platform"]).managed:
            raise BadRequest(f"run is for managed (svc) installs; this install is on {install['platform']}")
        require_ready(install)
        run_id = tokens.new_id()
        outcome = await self._dispatch(
            install_id, {"runId": run_id, "task": body.task, "source": "run"}, wait=True
        )
        if "refused" in outcome:  # cancelled since the check above: the answer a later call gets
            raise Conflict(outcome["errorMessage"]) if outcome["refused"] else NotFound("Install not found")
        return outcome

    async def trigger(self, install_id: str, body: WebhookBody) -> dict[str, Any]:
        """Queue a run from the webhook; the result goes to `callbackUrl` when given."""
        install = await self.store.installs.find_one({"_id": install_id})
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
        run_id = tokens.new_id()
        await self.store["pipeline_runs"].insert_one(
            {
                "_id": run_id,
                "installId": install_id,
                "status": "queued",
                "source": "webhook",
                "createdAt": utcnow(),
            }
        )
        payload = {
            "runId": run_id,
            "task": body.inputText or "",
            "source": "webhook",
            "callbackUrl": body.callbackUrl,
        }
        await self._dispatch(install_id, payload, wait=False)
        return {"runId": run_id, "status": "queued"}

    async def heartbeat(self, body: HeartbeatBody, secret: str | None) -> dict[str, Any]:
        """Run one orchA `http` agent for a heartbeat; answers in the deployer-webhook shape."""
        # Upstream agent ids come from each deployer's own server, so they may repeat across
        # installs: the install is the one whose secret the caller presents.
        candidates = await self.store.installs.find(
            {
                "deployedAgents.externalId": body.agentId,
                "platform": {"$in": self.installs.platform_ids("heartbeats")},
                "status": "completed",
            }
        ).to_list(20)
        install = None
        for candidate in candidates:
            expected = self.installs.vault.decrypt(candidate["webhookSecretEncrypted"])
            if secret and hmac.compare_digest(secret.encode(), expected.encode()):
                install = candidate
        if install is None:
            raise Unauthorized("Invalid runtime credential")
        agent = next(a for a in install["deployedAgents"] if a["externalId"] == body.agentId)
        beat = HeartbeatContext(
            install_id=install["_id"],
            platform=install["platform"],
            agent_key=agent["key"],
            platform_agent_id=body.agentId,
            credentials=self.installs._decrypt_json(install.get("credentialsEncrypted")),
            state=self.installs._decrypt_json(install.get("platformStateEncrypted")),
            payload=body.model_dump(),
            allow_private=self.installs.settings.egress_allow_private,
        )
        read = await self.installs.plugins.heartbeat_task(install["platform"], beat)
        context = body.context or {}
        task = (
            (read.task if read else "")
            or str(context.get("task") or context.get("prompt") or "")
            or (
                f"Heartbeat from the orchestrator (wake reason: {context.get('wakeReason') or 'scheduled'}; "
                f"task id: {context.get('taskId') or 'none'}). Do your work for this wake-up and report."
            )
        )
        payload = {
            "runId": tokens.new_id(),
            "task": task,
            "source": "heartbeat",
            "agentKey": agent["key"],
            "platformAgentId": body.agentId,
            "platformRunId": (read.platform_run_id if read else None) or body.runId,
            "platformTaskId": (read.platform_task_id if read else None) or context.get("taskId"),
        }
        outcome = await self._dispatch(install["_id"], payload, wait=True)
        try:
            problems = await self.installs.plugins.heartbeat_finished(
                install["platform"], replace(beat, outcome=outcome)
            )
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
    ) -> dict[str, Any]:
        """Resume the paused run (the oldest, or `run_id`) from the step after its gate (409 when none)."""
        install = await self.installs.owned(principal, install_id)
        query: Document = {"installId": install_id, "status": "paused"}
        if run_id is not None:
            query["_id"] = run_id
        paused = await self.store["pipeline_runs"].find_one(query, sort=[("pausedAt", 1), ("_id", 1)])
        if paused is None:
            raise Conflict("No pending gate found for this install")
        state = paused["state"]
        if state["fromStep"] >= len(install["definition"]["agents"]):
            raise Conflict("No agents remaining after gate")
        claimed = await self.store["pipeline_runs"].find_one_and_update(
            {"_id": paused["_id"], "status": "paused"}, {"$set": {"status": "queued"}}
        )
        if claimed is None:
            raise Conflict("No pending gate found for this install")
        await Events(self.store).emit(
            install_id, "gate_approved", gate_name=state["gate"], meta={"runId": paused["_id"]}, **actor
        )
        payload = {
            "runId": paused["_id"],
            "task": "",
            "source": paused.get("source", "run"),
            "input": state["input"],
            "fromStep": state["fromStep"],
            "inputTokens": state["inputTokens"],
            "outputTokens": state["outputTokens"],
            "bypassGates": bypass_gates,
            "callbackUrl": paused.get("callbackUrl"),
        }
        await self._dispatch(install_id, payload, wait=False)
        await Timeline(self.store).record(
            "gate",
            "gate.continue",
            install_id=install_id,
            actor=actor_of(principal.user_id, principal.via),
            meta={"runId": paused["_id"], "gate": state["gate"], "bypassGates": bypass_gates},
        )
        return {"ok": True}

    async def cancel(self, principal: Principal, install_id: str) -> dict[str, Any]:
        """Cancel the install's active run: {ok, runId, cancelledStep}; 404 when none is active."""
        await self.installs.owned(principal, install_id)
        active = await self.store["pipeline_runs"].find_one(
            {"installId": install_id, "status": {"$in": ["queued", "starting", "running"]}},
            sort=[("createdAt", -1)],
        )
        if active is None or self.runtime is None:
            raise NotFound("No active run for this install")
        if active["status"] == "queued":
            # Not started yet: nothing to stop in a worker, the run simply never starts.
            await self.store["pipeline_runs"].update_one(
                {"_id": active["_id"], "status": "queued"},
                {"$set": {"status": "failed", "errorMessage": CANCELLED, "endedAt": utcnow()}},
            )
            return {"ok": True, "runId": active["_id"], "cancelledStep": None}
        step = await self.runtime.cancel(install_id, active["_id"])
        if step is None:
            # The record says running but no worker runs it: it was interrupted.
            await self.store["pipeline_runs"].update_one(
                {"_id": active["_id"], "status": "running"},
                {"$set": {"status": "failed", "errorMessage": INTERRUPTED, "endedAt": utcnow()}},
            )
            raise NotFound("No active run for this install")
        return {"ok": True, "runId": active["_id"], "cancelledStep": step or None}

    async def _dispatch(self, install_id: str, payload: dict[str, Any], wait: bool) -> dict[str, Any]:
        if self.runtime is None:
            raise RuntimeFailure("The runtime is not available")
        if not wait:
            await self.runtime.submit(install_id, payload)
            return {}
        try:
            return await self.runtime.run(install_id, payload)
        except RuntimeFailure as exc:
            # The worker died mid-run, or (RuntimeBusy) never got a place: record the run as failed
            # (idempotent with its own recovery); a run that never started answers 503.
            busy = isinstance(exc, RuntimeBusy)
            await self.store["pipeline_runs"].update_one(
                {"_id": payload["runId"], "status": {"$in": ["queued", "starting", "running"]}},
                {
                    "$set": {
                        "status": "failed",
                        "errorMessage": str(exc) if busy else INTERRUPTED,
                        "endedAt": utcnow(),
                    }
                },
            )
            if busy:
                raise
            return failed_outcome(payload["runId"], str(exc) or INTERRUPTED)


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
