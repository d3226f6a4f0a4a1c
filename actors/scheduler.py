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
from typing import Any

import ray

from actors.runtime import NAMESPACE, RayRuntime
from config.settings import Settings
from svc.core import Store, Vault
from svc.jobs import Jobs
from svc.runtime import SchedulerCore
from svc.wiring import build_services

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
        store = Store.connect(self.mongodb_uri)
        runtime = RayRuntime(self.settings.ray_address, self.mongodb_uri, self.settings, self.vault_keys)
        core = SchedulerCore(store, runtime)
        services = build_services(self.settings, store, Vault(self.vault_keys), runtime)
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


class SchedulerKeeper:
    """Starts this database's scheduler actor from an API process, and stops it only if this
    process started it (another process restarts it)."""

    def __init__(self, runtime: RayRuntime) -> None:
        self.runtime = runtime
        self._started_scheduler = False

    def _scheduler_name(self) -> str:
        database = self.runtime.mongodb_uri.split("?", 1)[0].rsplit("/", 1)[-1] or "svc"
        return f"scheduler:{database}"

    async def ensure_scheduler(self) -> None:
        """Start the scheduler actor of this database unless one runs already."""
        assert self.runtime.settings is not None, "the runtime needs settings to start the scheduler"

        def get_or_create() -> Any:
            try:
                return ray.get_actor(self._scheduler_name(), namespace=NAMESPACE)
            except ValueError:
                self._started_scheduler = True
                return SchedulerActor.options(  # type: ignore[attr-defined]
                    name=self._scheduler_name(),
                    namespace=NAMESPACE,
                    get_if_exists=True,
                    lifetime="detached",
                ).remote(self.runtime.settings, self.runtime.mongodb_uri, self.runtime.vault_keys)

        actor = await asyncio.to_thread(get_or_create)
        await actor.start.remote()

    def stop_scheduler(self) -> None:
        """Stop the scheduler actor if this process started it (another process restarts it)."""
        if not getattr(self, "_started_scheduler", False) or not ray.is_initialized():
            return
        try:
            ray.kill(ray.get_actor(self._scheduler_name(), namespace=NAMESPACE), no_restart=True)
        except ValueError:
            pass
        self._started_scheduler = False
