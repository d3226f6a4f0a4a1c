"""The Scheduler actor: fires due cron schedules every second, and the service's jobs.

One per deployment (`scheduler:<deployment id>`, `actors.deployment.deployment_id`: two
deployments sharing a Ray cluster get two schedulers), detached, and restarted by Ray
after a crash (`max_restarts=-1`); a restarted copy starts its loop from the constructor,
without waiting to be called.

- Configuration: the actor is created with its deployment id only. Its settings, database
  URI and vault keys come from the deployment's published configuration
  (`actors.deployment.current`), read before every tick; when a newer version has been
  published (a rotated key, the embedded database on a new port) it rebuilds its services
  between two ticks.
- One active loop: before each tick the copy renews a lease in MongoDB (`leases`,
  `scheduler:<deployment id>`); a second copy (an orphan left by a raylet crash, or a
  new one beside a frozen one) stands by, and takes over once the lease has expired
  (LEASE_TTL_S). Every fire is claimed atomically in MongoDB too, so even two copies
  that overlapped would fire each schedule once.
- No API process stops it: API processes only make sure it exists (`SchedulerKeeper`),
  so the stop of one API never stops the schedules another relies on. It ends with the
  Ray cluster (a local Ray ends with the API that started it).

The periodic jobs (the monthly billing cycle, the run poller, mail and callback retries, the run
sweeper) run in a task each, so a long billing cycle delays neither a schedule nor another job.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray

from actors.deployment import DeploymentConfig, current, deployment_id
from actors.pool import PoolKeeper
from actors.runtime import NAMESPACE, RayRuntime
from plugins.tracing import sdk as tracing_sdk
from svc.core import Lease, Store, Vault
from svc.jobs import NAMES as JOB_NAMES
from svc.jobs import Jobs
from svc.runtime import SchedulerCore
from svc.wiring import build_services, dropped_spans

log = logging.getLogger(__name__)

TICK_S = 1.0
# A holder that has not renewed for this long loses the lease to a standing-by copy.
LEASE_TTL_S = 10.0


def scheduler_name(deployment: str) -> str:
    """The Ray name of a deployment's scheduler actor."""
    return f"scheduler:{deployment}"


@dataclass
class Built:
    """What one configuration version gives the loop: its store, lease, scheduler and jobs."""

    version: str
    store: Store
    lease: Lease
    core: SchedulerCore
    jobs: Jobs
    pool: PoolKeeper
    stop_traces: Callable[[], None]  # undoes this version's tracing set-up (tracing, #33)


@ray.remote(num_cpus=0, max_restarts=-1)
class SchedulerActor:
    """Runs the scheduler loop of one deployment while it holds the deployment's lease."""

    def __init__(self, deployment: str) -> None:
        self.deployment = deployment
        # This copy's identity in the lease: a restarted or orphaned copy is another holder.
        self.holder = uuid.uuid4().hex
        self._loop_task: asyncio.Task[None] | None = None
        self._job_tasks: dict[str, asyncio.Task[None]] = {}
        self._built: Built | None = None
        self.ticks = 0
        self.fires = 0
        self.leading = False
        # Start the loop as soon as the actor is up, also after Ray restarted it: a call to
        # itself runs once the constructor has returned.
        try:
            ray.get_runtime_context().current_actor.start.remote()
        except Exception as exc:  # the keeper's next call starts it
            log.warning("scheduler could not start its own loop: %s", type(exc).__name__)

    async def start(self) -> bool:
        """Start the loop (idempotent)."""
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.create_task(self._run())
        return True

    async def stats(self) -> dict[str, Any]:
        """The loop's state (tests, operators): ticks run, fires claimed, lease held, version."""
        return {
            "deployment": self.deployment,
            "holder": self.holder,
            "ticks": self.ticks,
            "fires": self.fires,
            "leading": self.leading,
            "version": self._built.version if self._built is not None else None,
        }

    async def _run(self) -> None:
        while True:
            try:
                await self._tick()
            except Exception as exc:  # a bad tick (the database away, say) must not stop the loop
                self.leading = False
                log.warning("scheduler tick failed: %s", type(exc).__name__)
            self.ticks += 1
            await asyncio.sleep(TICK_S)

    async def _tick(self) -> None:
        config = await asyncio.to_thread(current, self.deployment)
        if config is None:
            return  # no API process has published the deployment yet
        built = await self._services(config)
        self.leading = await built.lease.hold()
        if not self.leading:
            return
        self.fires += await built.core.tick()
        try:
            await built.pool.tick()  # spare install actors on every node (the warm pool)
        except Exception as exc:
            log.warning("warm pool not topped up: %s", type(exc).__name__)
        for name in JOB_NAMES:  # one task per job: a long charge cycle never holds up the sweeper
            task = self._job_tasks.get(name)
            if task is None or task.done():
                self._job_tasks[name] = asyncio.create_task(built.jobs.run(name))

    async def _services(self, config: DeploymentConfig) -> Built:
        """The services of the published configuration, rebuilt when its version changed."""
        built = self._built
        if built is not None and built.version == config.version:
            return built
        if built is not None:
            log.info(
                "scheduler of %s: configuration %s replaces %s",
                self.deployment,
                config.version,
                built.version,
            )
            running = [task for task in self._job_tasks.values() if not task.done()]
            if running:
                await asyncio.wait(running)  # jobs in progress finish on their store
            await built.store.close()
            await asyncio.to_thread(built.stop_traces)  # the previous configuration's traces
        settings = config.settings
        keys = list(config.vault_keys)
        store = Store.connect(config.mongodb_uri, settings.db_timeout_seconds)
        stop_traces = tracing_sdk.setup(  # this process's traces: schedule fires, callback retries (#33)
            settings.tracing,
            "scheduler",
            node=ray.get_runtime_context().get_node_id(),
            on_dropped=dropped_spans(store, "scheduler"),
        )
        runtime = RayRuntime(settings.ray_address, config.mongodb_uri, settings, keys, store)
        services = build_services(settings, store, Vault(keys), runtime)
        lease = Lease(store, scheduler_name(self.deployment), self.holder, LEASE_TTL_S)
        self._built = Built(
            config.version,
            store,
            lease,
            SchedulerCore(store, runtime),
            Jobs.for_services(services),
            PoolKeeper(store, settings, self.deployment),
            stop_traces,
        )
        return self._built


class SchedulerKeeper:
    """Makes sure the deployment's scheduler actor exists, from an API process.

    It never stops the actor: other API processes (and the schedules) rely on it, and
    Ray restarts it after a crash. Creation is `get_if_exists`, so processes racing to
    create it share one.
    """

    def __init__(self, runtime: RayRuntime) -> None:
        assert runtime.settings is not None, "the runtime needs settings to start the scheduler"
        self.runtime = runtime
        self.deployment = deployment_id(runtime.settings, runtime.mongodb_uri)

    @property
    def name(self) -> str:
        """The Ray name of the scheduler actor this keeper keeps."""
        return scheduler_name(self.deployment)

    async def ensure_scheduler(self) -> None:
        """Create the scheduler actor of this deployment unless one exists; make sure it loops."""

        def get_or_create() -> Any:
            return SchedulerActor.options(  # type: ignore[attr-defined]
                name=self.name, namespace=NAMESPACE, get_if_exists=True, lifetime="detached"
            ).remote(self.deployment)

        actor = await asyncio.to_thread(get_or_create)
        await actor.start.remote()
