"""Executing runs of managed installs, inside the install's actor.

`InstallRunner` loads the install, fills in its secrets, runs the team, and persists
every state change (the pipeline run, each agent step, the run record) before answering;
a webhook run's outcome is then posted to its callback, signed.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

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
from svc.runtime.agent_loop import AgentStep, RunScope, TeamResult, TeamRunner
from svc.runtime.events import Events, EventType
from svc.runtime.llm import LLM
from svc.runtime.pipelines import PipelineExecutor
from svc.runtime.run_events import RunEvents
from svc.runtime.schedules import note_scheduled_outcome
from svc.runtime.security_log import SecurityLog

log = logging.getLogger(__name__)

CANCELLED = "Run cancelled"
INTERRUPTED = "Interrupted: the install's worker stopped during the run; start it again"
CALLBACK_ATTEMPTS = 5
CALLBACK_BACKOFF_S = 0.5
SIGNATURE_HEADER = "Svc-Signature"
# A run handed over this long ago that never started was lost on its way (its start never came).
STALE_START = timedelta(minutes=10)
UPSTREAM_IDS = ("platformRunId", "platformAgentId", "platformTaskId")


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
        admission: Callable[[Document], Awaitable[None]] | None = None,
    ) -> None:
        self.store = store
        # Called with the install before any model call (spend caps; raises Conflict to refuse).
        self.admission = admission
        self.pipelines = PipelineExecutor(store, mailer or Mailer(store))
        self.vault = vault
        self.judge_model = judge_model
        self.allow_private = allow_private
        self.runs = Runs(store)
        self.llm = llm
        self.security_log = SecurityLog(store)
        self.events = Events(store)
        self.run_events = RunEvents(store)  # h-watch: live events of runs (docs/runs.md)
        # The step each active run is in (for cancel-run's answer).
        self.current_steps: dict[str, AgentStep] = {}
        # This runner's incarnation: every run it claims is stamped with it, so a restarted
        # worker recovers only what an earlier incarnation had claimed.
        self.incarnation = tokens.new_id()

    async def recover(self, install_id: str) -> int:
        """Mark runs an earlier incarnation was running (its worker stopped) as failed, and runs
        handed over long ago that never started; how many there were. A run only handed over
        (`starting`: its start is on its way to this worker) is left to start."""
        stale = utcnow() - STALE_START
        interrupted = (
            await self.store["pipeline_runs"]
            .find(
                {
                    "installId": install_id,
                    "$or": [
                        {"status": "running", "incarnation": {"$ne": self.incarnation}},
                        {"status": "starting", "createdAt": {"$lt": stale}},
                    ],
                }
            )
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
                "$set": {
                    "status": "running",
                    "startedAt": utcnow(),
                    "agentKey": root_key,
                    "incarnation": self.incarnation,
                },
                "$setOnInsert": {
                    "installId": install_id,
                    "source": source,
                    "createdAt": utcnow(),
                    # A heartbeat's upstream ids, so the run can be found on the platform too.
                    **{k: payload[k] for k in UPSTREAM_IDS if payload.get(k)},
                },
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

        watch = self.run_events.open(install_id, run_id, root_key, payload, source)  # h-watch
        # The per-run token cap (spend caps) counts what a continued run used before its gate too.
        cap = (install.get("limits") or {}).get("runTokenCap")
        before = int(payload.get("inputTokens") or 0) + int(payload.get("outputTokens") or 0)
        runner = TeamRunner(
            self.llm,
            self.security_log,
            write_step,
            started,
            events=watch,
            token_cap=cap,
            tokens_used=before,
        )
        pause: dict[str, Any] | None = None
        try:
            if self.admission is not None:
                await self.admission(install)
            if payload.get("agentKey"):
                agent = next(a for a in definition["agents"] if a["key"] == payload["agentKey"])
                result = await runner.run_agent(scope, agent, payload["task"])
            elif definition.get("gates"):
                result, pause = await self.pipelines.run(install, definition, scope, runner, payload)
            else:
                result = await runner.run_team(scope, definition, payload["task"])
        except Conflict as exc:  # refused by admission (a spend cap): no model was called
            result = TeamResult("failed", None, root_key, 0, 0, [], exc.message)
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
            await self.run_events.finish(install_id, run_id, result, pause)  # h-watch
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
        await self.run_events.finish(install_id, run_id, result)  # h-watch
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
            platform_agent_id=finished.get("platformAgentId"),
            platform_run_id=finished.get("platformRunId"),
        )
        await touch_last_run(self.store, install["_id"])
        if source == "schedule":
            await note_scheduled_outcome(self.store, install["_id"], status == "completed", error)

    async def callback(self, install: Document, url: str, outcome: dict[str, Any]) -> bool:
        """Store the callback and make its first attempt; the job runner retries it durably
        (svc/runtime/callbacks.py). True when the first attempt delivered it."""
        from svc.runtime.callbacks import CallbackDelivery  # the delivery module (h-caps)

        delivery = CallbackDelivery(self.store, self.vault, self.allow_private)
        return await delivery.deliver(install, url, outcome)


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
