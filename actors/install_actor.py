"""InstallActor: one Ray actor per install with work, the single authority over its runs.

Named `install:<id>` in the `svc` namespace and detached, so any API process finds the same
actor. Every command that changes a run of its install comes here (start, run, continue,
cancel) and is applied through the run ledger, stamped with this copy's incarnation.

Its constructor reads the deployment's current configuration from Ray's key-value store
(actors/deployment.py), claims the install's incarnation record, recovers (runs an earlier
copy had claimed end failed; queued runs are started; paused pipelines are held) and starts
its clock: a restarted actor settles its runs and idles out without being called. Between
runs, an actor whose configuration is older than the published one, or that a newer copy
superseded, leaves with `ray.actor.exit_actor()` (never `ray.kill` on its own handle, which
after a node crash names the healthy new copy).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

import ray

from actors import deployment
from plugins import tracing
from plugins.tracing import sdk as tracing_sdk
from svc.core import Document, Store, Vault, counters
from svc.runtime import CANCELLED, InstallRunner, failed_outcome, ledger
from svc.wiring import build_install_runner

log = logging.getLogger(__name__)

BEAT_S = 5.0
DATABASE_DOWN = "Database unavailable during the run"
NO_PENDING_GATE = "No pending gate found for this install"
NO_AGENTS_LEFT = "No agents remaining after gate"


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)
class InstallActor:
    """Owns one install's runs."""

    def __init__(self, install_id: str, deployment_id: str) -> None:
        config = deployment.current(deployment_id)
        if config is None:
            raise RuntimeError(f"no configuration published for deployment {deployment_id}")
        self.install_id = install_id
        self.deployment_id = deployment_id
        self.config_version = config.version
        self.settings = config.settings
        self.store = Store.connect(config.mongodb_uri, self.settings.db_timeout_seconds)
        tracing_sdk.setup(  # this process's traces (tracing, #33)
            self.settings.tracing,
            "install_actor",
            node=ray.get_runtime_context().get_node_id(),
            on_dropped=counters.dropped_spans(self.store, "install_actor"),
        )
        self.runner: InstallRunner = build_install_runner(
            self.settings, self.store, Vault(list(config.vault_keys))
        )
        self.active: dict[str, asyncio.Task[dict[str, Any]]] = {}
        self.paused: dict[str, Document] = {}
        self.last_used = time.monotonic()
        self.leaving = False
        self._wake = asyncio.Event()
        loop = asyncio.get_running_loop()
        self._recovered = loop.create_task(self._recover())
        self._watcher = loop.create_task(self._watch())

    # ---- commands ------------------------------------------------------------------------------

    async def ready(self) -> bool:
        """True once recovered and current; False while this copy is leaving (ask again later)."""
        await self._recovered
        return not await self._should_leave()

    async def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Start a queued run (idempotent by run id) and wait for its outcome."""
        if not await self.ready():
            return {"retry": True}
        with tracing.attached(payload.get("trace")):  # the run joins the caller's trace (#33)
            task = self._spawn(payload["runId"])
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():  # cancel-run stopped it before its team ran
                return failed_outcome(payload["runId"], CANCELLED)
            raise

    async def start(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Start a queued run without waiting (webhook, schedule, retry, wait:false)."""
        if not await self.ready():
            return {"retry": True}
        with tracing.attached(payload.get("trace")):  # the run joins the caller's trace (#33)
            self._spawn(payload["runId"])
        return {"ok": True}

    async def cancel(self, run_id: str) -> dict[str, Any]:
        """Cancel a run of this install, decided from the ledger: {cancelled, step}."""
        await self._recovered
        task = self.active.get(run_id)
        if task is not None:
            step = self.runner.cancel_step(run_id) or ""
            task.cancel()
            return {"cancelled": True, "step": step}
        # Not running here: a queued run simply never starts.
        cancelled = await self.runner.abort(self.install_id, run_id, CANCELLED)
        return {"cancelled": cancelled, "step": None}

    async def resume(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Continue a paused pipeline (the oldest, or `runId`) from the step after its gate."""
        if not await self.ready():
            return {"retry": True}
        wanted = payload.get("runId")
        candidates = sorted(
            (run for run in self.paused.values() if wanted in (None, run["_id"])),
            key=lambda run: (run.get("pausedAt") or run["createdAt"], run["_id"]),
        )
        if not candidates:
            return {"conflict": NO_PENDING_GATE}
        paused = candidates[0]
        install = await self.store.installs.find_one({"_id": self.install_id}, {"definition": 1})
        if install is None or paused["state"]["fromStep"] >= len(install["definition"]["agents"]):
            return {"conflict": NO_AGENTS_LEFT}
        run = await ledger.resume(
            self.store, paused["_id"], self.runner.incarnation, bool(payload.get("bypassGates"))
        )
        self.paused.pop(paused["_id"], None)
        if run is None:
            return {"conflict": NO_PENDING_GATE}
        actor = payload.get("actor") or {}
        await self.runner.events.emit(
            self.install_id,
            "gate_approved",
            gate_name=run["state"]["gate"],
            meta={"runId": run["_id"]},
            **actor,
        )
        with tracing.attached(payload.get("trace")):  # linked from the resumed run's span (#33)
            self._spawn(run["_id"], resumed=run)
        return {"ok": True, "runId": run["_id"], "gate": run["state"]["gate"]}

    async def status(self) -> dict[str, Any]:
        """Active and paused runs, idle time, incarnation and pid (tests and operators)."""
        await self._recovered
        return {
            "active": sorted(self.active),
            "paused": sorted(self.paused),
            "idleSeconds": time.monotonic() - self.last_used,
            "incarnation": self.runner.incarnation,
            "configVersion": self.config_version,
            "pid": os.getpid(),
        }

    # ---- inside --------------------------------------------------------------------------------

    def _spawn(self, run_id: str, resumed: Document | None = None) -> asyncio.Task[dict[str, Any]]:
        """The task running `run_id` here (one per run: a repeated start joins it)."""
        task = self.active.get(run_id)
        if task is None:
            self.last_used = time.monotonic()
            task = asyncio.get_running_loop().create_task(self._execute(run_id, resumed))
            self.active[run_id] = task
        return task

    async def _execute(self, run_id: str, resumed: Document | None) -> dict[str, Any]:
        try:
            outcome = await self.runner.execute(self.install_id, run_id, resumed)
        except asyncio.CancelledError:
            await self.runner.abort(self.install_id, run_id, CANCELLED)
            raise
        except Exception as exc:  # the database failed outside a step: settle what can be settled
            log.error("run could not be carried out: %s", type(exc).__name__)
            outcome = failed_outcome(run_id, DATABASE_DOWN)
            try:
                await self.runner.abort(self.install_id, run_id, DATABASE_DOWN)
            except Exception:  # still down: the sweeper settles it once this copy is gone
                log.warning("run %s left for the sweeper", run_id)
        finally:
            self.active.pop(run_id, None)
            self.last_used = time.monotonic()
            self._wake.set()
        if outcome.get("pausedAtGate"):
            paused = await self.store[ledger.RUNS].find_one({"_id": run_id, "status": "paused"})
            if paused is not None:
                self.paused[run_id] = paused
        return outcome

    async def _recover(self) -> None:
        queued, paused = await self.runner.recover(self.install_id)
        self.paused = paused
        for run_id in queued:
            self._spawn(run_id)
        if queued:
            log.info("starting %s run(s) queued for this install", len(queued))

    async def _should_leave(self) -> bool:
        """Leave when leaving already, or idle with an older configuration than the published one."""
        if self.leaving:
            return True
        if self.active:
            return False
        # One read of the cluster's key-value store per command (about a millisecond): a command
        # right after a new configuration was published already meets a fresh actor.
        published = await asyncio.to_thread(deployment.current, self.deployment_id)
        if published is not None and published.version != self.config_version:
            log.info("configuration changed; this install actor leaves for a fresh one")
            self.leaving = True
            self._wake.set()
        return self.leaving

    async def _watch(self) -> None:
        """The clock, from the constructor: beat the incarnation record, leave when superseded,
        idle, or older than the configuration, and only between runs."""
        idle_limit = self.settings.actor_idle_seconds
        period = max(0.05, min(BEAT_S, idle_limit / 4))
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), period)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                current = await ledger.beat(self.store, self.install_id, self.runner.incarnation)
            except Exception as exc:  # a database blip must not stop the clock
                log.warning("incarnation beat failed: %s", type(exc).__name__)
                continue
            if not current:
                log.warning("a newer copy of this install's actor took over; this copy stops")
                for task in list(self.active.values()):
                    task.cancel()
                ray.actor.exit_actor()
            idle = time.monotonic() - self.last_used >= idle_limit
            if not self.active and (idle or await self._should_leave()):
                await ledger.leave(self.store, self.install_id, self.runner.incarnation)
                log.info("install actor leaving (idle: %s)", idle)
                ray.actor.exit_actor()
