"""InstallActor: one Ray actor per install with work, running its runs.

Named `install:<id>` in the `svc` namespace and detached, so any API process
finds the same actor, and it outlives the process that created it. It keeps no
state that is not in MongoDB: a restarted actor (Ray restarts it after a crash)
begins by marking the runs it was running as failed, and new runs work at once.
It exits by itself after SVC_ACTOR_IDLE_SECONDS without a run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import ray

from config.settings import Settings
from svc.core import Store, Vault
from svc.runtime import CANCELLED, InstallRunner, failed_outcome
from svc.wiring import build_install_runner

log = logging.getLogger(__name__)


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)
class InstallActor:
    """Runs one install's work."""

    def __init__(self, install_id: str, settings: Settings, mongodb_uri: str, vault_keys: list[str]) -> None:
        self.install_id = install_id
        self.settings = settings
        self.mongodb_uri = mongodb_uri
        self.vault_keys = vault_keys
        self.runner: InstallRunner | None = None
        self.active: dict[str, asyncio.Task[dict[str, Any]]] = {}
        self.last_used = time.monotonic()
        self._ready = asyncio.Lock()
        self._watcher: asyncio.Task[None] | None = None

    async def _runner(self) -> InstallRunner:
        """Connect on first use and recover runs a previous incarnation left running."""
        async with self._ready:
            if self.runner is None:
                store = Store.connect(self.mongodb_uri)
                self.runner = build_install_runner(self.settings, store, Vault(self.vault_keys))
                recovered = await self.runner.recover(self.install_id)
                if recovered:
                    log.warning("marked %s interrupted run(s) failed", recovered)
                self._watcher = asyncio.create_task(self._evict_when_idle())
        return self.runner

    async def ready(self) -> bool:
        """Answer once connected and recovered (the runtime calls it before handing over a run)."""
        await self._runner()
        return True

    async def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Run and wait for the outcome."""
        runner = await self._runner()
        self.last_used = time.monotonic()
        task = asyncio.create_task(runner.execute(self.install_id, payload))
        self.active[payload["runId"]] = task
        try:
            return await task
        except asyncio.CancelledError:
            if not task.cancelled():
                raise  # this call itself was cancelled
            # Cancelled before the run had started its steps.
            return failed_outcome(payload["runId"], CANCELLED)
        finally:
            self.active.pop(payload["runId"], None)
            self.last_used = time.monotonic()

    async def cancel(self, run_id: str) -> str | None:
        """Cancel an active run; the key of the step it was in ("" before any), None if not active."""
        task = self.active.get(run_id)
        if task is None or self.runner is None:
            return None
        step = self.runner.cancel_step(run_id) or ""
        task.cancel()
        return step

    async def status(self) -> dict[str, Any]:
        """Active runs and idle time (for tests and operators)."""
        await self._runner()
        return {"active": sorted(self.active), "idleSeconds": time.monotonic() - self.last_used}

    async def _evict_when_idle(self) -> None:
        idle_limit = self.settings.actor_idle_seconds
        while True:
            await asyncio.sleep(min(5.0, max(idle_limit / 4, 0.1)))
            if not self.active and time.monotonic() - self.last_used >= idle_limit:
                log.info("install actor idle for %ss; exiting", idle_limit)
                ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
                return
