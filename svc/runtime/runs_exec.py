"""Executing runs of `svc` installs (inside the install's actor), and starting them (in the API).

`InstallRunner` runs where the actor lives: it loads the install, fills in its
secrets, runs the team, and persists every state change (the pipeline run, each
agent step, the run record) before answering. `RunService` is the API side: it
checks the caller and the install, then hands the run to the runtime port.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from typing import Any

import httpx
from pydantic import Field

from plugins.egress import EgressDenied, egress_client
from svc.core import (
    BadRequest,
    Conflict,
    Document,
    Mailer,
    NotFound,
    RequestBody,
    Runtime,
    RuntimeFailure,
    Store,
    Unauthorized,
    Vault,
    tokens,
    utcnow,
)
from svc.identity import Principal
from svc.installs import Installs, interpolate
from svc.runs import Runs, require_ready
from svc.runtime.agent_loop import AgentStep, RunScope, TeamResult, TeamRunner
from svc.runtime.events import Events, EventType
from svc.runtime.llm import LLM
from svc.runtime.pipelines import PipelineExecutor
from svc.runtime.security_log import SecurityLog

log = logging.getLogger(__name__)

CANCELLED = "Run cancelled"
INTERRUPTED = "Interrupted: the install's worker stopped during the run; start it again"
CALLBACK_ATTEMPTS = 5
CALLBACK_BACKOFF_S = 0.5
SIGNATURE_HEADER = "Svc-Signature"


class RunBody(RequestBody):
    """POST /api/installs/:installId/run."""

    task: str = Field(min_length=1, max_length=100_000)


class WebhookBody(RequestBody):
    """POST /api/webhook/:token."""

    inputText: str | None = Field(default=None, max_length=100_000)
    callbackUrl: str | None = Field(default=None, max_length=2048)


def sign(body: bytes, secret: str, timestamp: int | None = None) -> str:
    """`t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">` (the Stripe scheme)."""
    stamp = int(time.time()) if timestamp is None else timestamp
    digest = hmac.new(secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={stamp},v1={digest}"


class InstallRunner:
    """Runs one install's work; lives in the install's actor."""

    def __init__(
        self,
        store: Store,
        vault: Vault,
        llm: LLM,
        judge_model: str,
        allow_private: bool,
        mailer: Mailer | None = None,
    ) -> None:
        self.store = store
        self.pipelines = PipelineExecutor(store, mailer or Mailer(store))
        self.vault = vault
        self.judge_model = judge_model
        self.allow_private = allow_private
        self.runs = Runs(store)
        self.llm = llm
        self.security_log = SecurityLog(store)
        self.events = Events(store)
        # The step each active run is in (for cancel-run's answer).
        self.current_steps: dict[str, AgentStep] = {}

    async def recover(self, install_id: str) -> int:
        """Mark runs left `running` by a stopped worker as failed; how many there were."""
        interrupted = (
            await self.store["pipeline_runs"]
            .find({"installId": install_id, "status": {"$in": ["starting", "running"]}})
            .to_list(None)
        )
        install = await self.store.installs.find_one({"_id": install_id})
        for run in interrupted:
            await self._finish(
                install,
                run["_id"],
                run.get("agentKey"),
                "failed",
                0,
                0,
                INTERRUPTED,
                run.get("source", "run"),
            )
        return len(interrupted)

    async def execute(self, install_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Run the team on the task; persist the outcome; post the callback if one was asked for."""
        run_id, source = payload["runId"], payload.get("source", "run")
        install = await self.store.installs.find_one({"_id": install_id})
        if install is None or install["status"] != "completed":
            return await self._refused(install_id, run_id)
        definition = interpolate(install["definition"], install.get("variables") or {})
        root_key = next(
            (a["key"] for a in definition["agents"] if not a.get("reportsTo")), definition["agents"][0]["key"]
        )
        await self.store["pipeline_runs"].update_one(
            {"_id": run_id},
            {
                "$set": {"status": "running", "startedAt": utcnow(), "agentKey": root_key},
                "$setOnInsert": {"installId": install_id, "source": source, "createdAt": utcnow()},
            },
            upsert=True,
        )
        # Written first, read second: a cancellation that answered before this read is seen,
        # so no run starts after a cancellation has answered (docs/consistency.md).
        if not await self.store.installs.count_documents({"_id": install_id, "status": "completed"}, limit=1):
            return await self._refused(install_id, run_id)
        scope = RunScope(
            install_id, run_id, await self.secrets_of(install), self.allow_private, self.judge_model
        )

        async def write_step(step: AgentStep) -> None:
            await self._write_step(install, run_id, step)

        def started(step: AgentStep) -> None:
            self.current_steps[run_id] = step

        runner = TeamRunner(self.llm, self.security_log, write_step, started)
        pause: dict[str, Any] | None = None
        try:
            if payload.get("agentKey"):
                agent = next(a for a in definition["agents"] if a["key"] == payload["agentKey"])
                result = await runner.run_agent(scope, agent, payload["task"])
            elif definition.get("gates"):
                result, pause = await self.pipelines.run(install, definition, scope, runner, payload)
            else:
                result = await runner.run_team(scope, definition, payload["task"])
        except Exception as exc:  # a bug must end the run visibly, not leave it running
            log.error("run failed unexpectedly: %s", type(exc).__name__)
            result = TeamResult("failed", None, root_key, 0, 0, [], f"Internal error ({type(exc).__name__})")
        except asyncio.CancelledError:
            # cancel-run: the step in progress ends as cancelled and the run as failed.
            step = self.current_steps.get(run_id)
            if step is not None:
                step.status, step.error, step.ended_at = "failed", CANCELLED, utcnow()
                await self._write_step(install, run_id, step, event="step_cancelled")
            result = TeamResult("failed", None, root_key, 0, 0, [], CANCELLED)
        finally:
            self.current_steps.pop(run_id, None)
        if pause is not None:
            await self.store["pipeline_runs"].update_one(
                {"_id": run_id},
                {
                    "$set": {
                        "status": "paused",
                        "pausedAtGate": pause["gate"],
                        "state": pause,
                        "callbackUrl": payload.get("callbackUrl"),
                        "pausedAt": utcnow(),
                    }
                },
            )
            outcome = {**outcome_of(run_id, result), "pausedAtGate": pause["gate"]}
            if payload.get("callbackUrl"):
                await self.callback(install, payload["callbackUrl"], outcome)
            return outcome
        await self._finish(
            install,
            run_id,
            result.agent,
            result.status,
            result.input_tokens,
            result.output_tokens,
            result.error,
            source,
        )
        outcome = outcome_of(run_id, result)
        if payload.get("callbackUrl"):
            await self.callback(install, payload["callbackUrl"], outcome)
        return outcome

    async def _refused(self, install_id: str, run_id: str) -> dict[str, Any]:
        """A run handed over after its install stopped being ready ends failed, marked `refused`."""
        install = await self.store.installs.find_one({"_id": install_id}, {"status": 1})
        message = (
            "Install not found" if install is None else f"Install is not ready (status: {install['status']})"
        )
        await self.store["pipeline_runs"].update_one(
            {"_id": run_id, "status": {"$in": ["queued", "running"]}},
            {"$set": {"status": "failed", "errorMessage": message, "endedAt": utcnow()}},
        )
        return {**failed_outcome(run_id, message), "refused": install is not None}

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
        """Store an agent's step and its event (step_completed, step_failed or step_cancelled)."""
        duration = int(((step.ended_at or utcnow()) - step.started_at).total_seconds() * 1000)
        await self.store["agent_runs"].insert_one(
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
        kind: EventType = event or ("step_completed" if step.status == "completed" else "step_failed")
        await self.events.emit(install["_id"], kind, step_key=step.agent_key, meta={"runId": run_id})

    def cancel_step(self, run_id: str) -> str | None:
        """The key of the step a run is in (None when it is not running here)."""
        step = self.current_steps.get(run_id)
        return step.agent_key if step is not None else None

    async def _finish(
        self,
        install: Document | None,
        run_id: str,
        agent_key: str | None,
        status: str,
        input_tokens: int,
        output_tokens: int,
        error: str | None,
        source: str,
    ) -> None:
        finished = await self.store["pipeline_runs"].find_one_and_update(
            {"_id": run_id, "status": {"$in": ["queued", "starting", "running"]}},
            {
                "$set": {
                    "status": status,
                    "endedAt": utcnow(),
                    "inputTokens": input_tokens,
                    "outputTokens": output_tokens,
                    "errorMessage": error,
                }
            },
        )
        if finished is None or install is None:
            return  # already finished (a retried call, or recovered by another process)
        await self.runs.record(
            install,
            agent_key=agent_key,
            status=status,
            source=source,  # type: ignore[arg-type]
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            error_message=error,
            run_id=run_id,
        )
        await self.store.installs.update_one({"_id": install["_id"]}, {"$set": {"lastRunAt": utcnow()}})

    async def callback(self, install: Document, url: str, outcome: dict[str, Any]) -> bool:
        """POST the result to the caller's URL, signed, retried with backoff; True when delivered."""
        body = json.dumps(
            {
                "runId": outcome["runId"],
                "installId": install["_id"],
                "status": outcome["status"],
                "response": outcome["response"],
                "inputTokens": outcome["inputTokens"],
                "outputTokens": outcome["outputTokens"],
                **({"pausedAtGate": outcome["pausedAtGate"]} if outcome.get("pausedAtGate") else {}),
            }
        ).encode()
        token = install.get("webhookTokenEncrypted")
        secret = self.vault.decrypt(token) if token else ""
        async with egress_client(self.allow_private, timeout=15.0) as client:
            for attempt in range(CALLBACK_ATTEMPTS):
                headers = {"Content-Type": "application/json", SIGNATURE_HEADER: sign(body, secret)}
                try:
                    response = await client.post(url, content=body, headers=headers)
                    if response.status_code < 500 and response.status_code != 429:
                        return response.status_code < 300
                except EgressDenied as exc:
                    log.warning("callback refused by the egress guard: %s", exc.reason)
                    return False
                except (httpx.InvalidURL, ValueError):
                    log.warning("callback URL is not usable")
                    return False
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(CALLBACK_BACKOFF_S * 2**attempt)
        log.warning("callback not delivered after %s attempts", CALLBACK_ATTEMPTS)
        return False


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


class RunService:
    """Starts runs from the API (sync runs, webhook triggers, orchA heartbeats)."""

    def __init__(self, store: Store, installs: Installs, runtime: Runtime | None) -> None:
        self.store = store
        self.installs = installs
        self.runtime = runtime

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
        context = body.context or {}
        task = str(context.get("task") or context.get("prompt") or "") or (
            f"Heartbeat from the orchestrator (wake reason: {context.get('wakeReason') or 'scheduled'}; "
            f"task id: {context.get('taskId') or 'none'}). Do your work for this wake-up and report."
        )
        payload = {"runId": tokens.new_id(), "task": task, "source": "heartbeat", "agentKey": agent["key"]}
        outcome = await self._dispatch(install["_id"], payload, wait=True)
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
            # The worker died mid-run: record the run as failed (idempotent with its own recovery).
            await self.store["pipeline_runs"].update_one(
                {"_id": payload["runId"], "status": {"$in": ["queued", "starting", "running"]}},
                {"$set": {"status": "failed", "errorMessage": INTERRUPTED, "endedAt": utcnow()}},
            )
            return failed_outcome(payload["runId"], str(exc) or INTERRUPTED)


class HeartbeatBody(RequestBody):
    """POST /api/runtime/webhook: the orchestration platform's heartbeat."""

    runId: str = Field(min_length=1, max_length=200)
    agentId: str = Field(min_length=1, max_length=200)
    companyId: str | None = Field(default=None, max_length=200)
    context: dict[str, Any] = Field(default_factory=dict)


class RuntimeTestBody(RequestBody):
    """POST /api/runtime/webhook/test."""

    systemPrompt: str = Field(min_length=1, max_length=100_000)
    task: str = Field(min_length=1, max_length=100_000)
