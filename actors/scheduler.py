"""The Scheduler actor: fires due cron schedules every second, and the service's jobs.

One per database (`scheduler:<database>`), detached. Any number may run (one per
API process that could not find it, or a restarted one): every fire is claimed
atomically in MongoDB, so each fires once. The periodic jobs (the monthly billing
cycle, the run poller) run in a task of their own, so a long billing cycle never
delays a schedule.
"""

from __future__ import annotations

import asyncio
import logging

import ray

from config.settings import Settings
from plugins.manager import Plugins
from svc.core import Store, Vault
from svc.jobs import Jobs
from svc.runtime import SchedulerCore
from svc.services import Services

log = logging.getLogger(__name__)

TICK_S = 1.0


@ray.remote(num_cpus=0, max_restarts=-1)
class SchedulerActor:
    """Runs the scheduler loop."""

    def __init__(self, settings: Settings, mongodb_uri: str, vault_keys: list[str]) -> None:
        self.settings = settings
        self.mongodb_uri = mongodb_uri
        self.vault_keys = vault_keys
        self._loop_task: asyncio.Task[None] | None = None
        self.ticks = 0

    async def start(self) -> bool:
        """Start the loop (idempotent)."""
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.create_task(self._run())
        return True

    async def stats(self) -> dict[str, int]:
        """How many ticks have run (tests, operators)."""
        return {"ticks": self.ticks}

    async def _run(self) -> None:
        from actors.runtime import RayRuntime  # the runtime module imports this one

        store = Store.connect(self.mongodb_uri)
        runtime = RayRuntime(self.settings.ray_address, self.mongodb_uri, self.settings, self.vault_keys)
        core = SchedulerCore(store, runtime)
        services = Services.build(
            self.settings, store, Vault(self.vault_keys), runtime, Plugins(self.settings.disabled_plugins)
        )
        jobs = Jobs.for_services(services)
        jobs_task: asyncio.Task[None] | None = None
        while True:
            try:
                await core.tick()
            except Exception as exc:  # a bad tick must not stop the scheduler
                log.warning("scheduler tick failed: %s", type(exc).__name__)
            if jobs_task is None or jobs_task.done():
                jobs_task = asyncio.create_task(jobs.tick())
            self.ticks += 1
            await asyncio.sleep(TICK_S)
