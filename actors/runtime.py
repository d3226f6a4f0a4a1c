"""Connects the process to Ray, and runs installs' work in their actors.

Every `ray.*` call of the API process goes through `RayRuntime`, so the rest of
the code sees only the `svc.ports.Runtime` protocol. Workers get the database
URI in their environment, so actors reach the same MongoDB as the API.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

from actors import capacity
from actors.install_actor import InstallActor
from config.settings import Settings
from svc.core import Reaper, RuntimeFailure

log = logging.getLogger(__name__)

PING_TIMEOUT_S = 5.0
NAMESPACE = "svc"


def actor_name(install_id: str) -> str:
    """The Ray name of an install's actor."""
    return f"install:{install_id}"


@contextlib.contextmanager
def kept_signal_handlers() -> Iterator[None]:
    """Put this process's SIGTERM and SIGINT handlers back after the block.

    Ray's driver installs a C-level handler for SIGTERM that prints a stack and
    aborts the process, which would cut `svc serve`'s ordered shut-down short.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    kept = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in kept.items():
            if handler is not None:
                signal.signal(signum, handler)


class RayRuntime:
    """Owns this process's Ray connection (and the local Ray it may have started)."""

    def __init__(
        self,
        address: str | None,
        mongodb_uri: str,
        settings: Settings | None = None,
        vault_keys: list[str] | None = None,
    ) -> None:
        self.address = address
        self.mongodb_uri = mongodb_uri
        self.settings = settings
        self.vault_keys = vault_keys or []
        self._owned = False
        self._reaper: Reaper | None = None
        self._background: set[asyncio.Task[Any]] = set()
        # Handles of actors that answered recently, so a warm run skips the readiness round trip.
        self._warm: dict[str, tuple[Any, float]] = {}

    def start(self) -> None:
        """Connect (joining a Ray this process already has, if any).

        Called on the main thread: a local Ray's processes are tied to the thread
        that starts them and die with it. Their children (workers, agents) are
        ended by a `Reaper` as soon as this process has gone, however it went.
        """
        if ray.is_initialized():
            log.info("using the Ray connection this process already has")
            return
        local = self.address is None and not os.environ.get("RAY_ADDRESS")
        reaper = Reaper() if local else None
        try:
            with reaper.marking() if reaper is not None else contextlib.nullcontext(), kept_signal_handlers():
                ray.init(
                    address=self.address,
                    namespace=NAMESPACE,
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                    runtime_env={"env_vars": {"SVC_MONGODB_URI": self.mongodb_uri}},
                )
        except BaseException:
            if ray.is_initialized():
                ray.shutdown()
            if reaper is not None:
                reaper.close()
            raise
        self._reaper = reaper
        self._owned = True
        log.info("connected to Ray (%s)", self.address or "local instance")

    async def ping(self) -> bool:
        """True when the Ray control plane answers within PING_TIMEOUT_S."""
        if not ray.is_initialized():
            return False
        try:
            resources = await asyncio.wait_for(asyncio.to_thread(ray.cluster_resources), PING_TIMEOUT_S)
        except Exception as exc:  # any failure means "not reachable" to a health check
            log.warning("Ray ping failed: %s", type(exc).__name__)
            return False
        return bool(resources)

    async def active_actors(self) -> int:
        """How many install actors are alive now (GET /metrics): one control-plane call."""
        if not ray.is_initialized():
            return 0
        named = await asyncio.wait_for(
            asyncio.to_thread(ray.util.list_named_actors, all_namespaces=True), PING_TIMEOUT_S
        )
        prefix = actor_name("")
        return sum(
            1
            for entry in named
            if entry.get("namespace") == NAMESPACE and entry.get("name", "").startswith(prefix)
        )

    def _actor(self, install_id: str) -> Any:
        assert self.settings is not None, "the runtime needs settings to start actors"
        return InstallActor.options(  # type: ignore[attr-defined]
            name=actor_name(install_id),
            namespace=NAMESPACE,
            get_if_exists=True,
            lifetime="detached",
            **capacity.actor_resources(self.settings),
        ).remote(install_id, self.settings, self.mongodb_uri, self.vault_keys)

    async def _ready_actor(self, install_id: str, trust_warm: bool = True) -> Any:
        """The install's actor once it answers; waits out a restart, replaces a dead one."""
        warm = self._warm.get(install_id)
        if trust_warm and warm is not None and time.monotonic() - warm[1] < self._warm_ttl():
            return warm[0]
        # Wait for placement up to a deadline, not a number of attempts: a pending actor is
        # queued for room on the cluster (actors/capacity.py); NoRoom is a RuntimeBusy (503).
        deadline = capacity.placement_deadline(self.settings)
        delay = capacity.RETRY_DELAY_S
        while True:
            actor = await asyncio.to_thread(self._actor, install_id)
            try:
                await capacity.ready_by(actor.ready.remote(), deadline)
                self._warm[install_id] = (actor, time.monotonic())
                return actor
            except (ActorUnavailableError, ActorDiedError, RayActorError):
                delay = await capacity.backoff(delay, deadline)

    async def run(self, install_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Run in the install's actor (created on demand) and wait; RuntimeFailure if it dies."""
        actor = await self._ready_actor(install_id)
        try:
            result = await actor.run.remote(payload)
        except (RayActorError, ActorDiedError, ActorUnavailableError) as exc:
            self._warm.pop(install_id, None)
            log.warning("install actor failed during a run: %s", type(exc).__name__)
            raise RuntimeFailure("The install's worker stopped during the run") from None
        self._warm[install_id] = (actor, time.monotonic())
        return result

    def _warm_ttl(self) -> float:
        """How long a handle counts as warm: well within the actor's idle exit."""
        idle = self.settings.actor_idle_seconds if self.settings is not None else 300.0
        return min(30.0, idle / 2)

    async def submit(self, install_id: str, payload: dict[str, Any]) -> None:
        """Start a run in the install's actor without waiting for it (always checked live: nobody
        waits on the answer to notice a dead actor)."""
        actor = await self._ready_actor(install_id, trust_warm=False)
        task = asyncio.ensure_future(actor.run.remote(payload))
        self._background.add(task)
        task.add_done_callback(self._settled)

    def _settled(self, task: asyncio.Future[Any]) -> None:
        self._background.discard(task)  # type: ignore[arg-type]
        if not task.cancelled() and task.exception() is not None:
            log.warning("queued run ended with %s", type(task.exception()).__name__)

    async def cancel(self, install_id: str, run_id: str) -> str | None:
        """Cancel a run in the install's actor; the step it was in, or None if it is not running there."""
        actor = await asyncio.to_thread(self.actor_handle, install_id)
        if actor is None:
            return None
        try:
            return await actor.cancel.remote(run_id)
        except (RayActorError, ActorDiedError, ActorUnavailableError):
            return None

    def actor_handle(self, install_id: str) -> Any:
        """The install's actor if it exists (tests and operators), else None."""
        try:
            return ray.get_actor(actor_name(install_id), namespace=NAMESPACE)
        except ValueError:
            return None

    def stop(self) -> None:
        """Disconnect, stopping the local Ray if this object started it."""
        if self._owned and ray.is_initialized():
            started = time.monotonic()
            ray.shutdown()
            log.debug("Ray disconnected in %.2fs", time.monotonic() - started)
        self._owned = False
        if self._reaper is not None:
            started = time.monotonic()
            self._reaper.close()
            self._reaper = None
            log.debug("local Ray's remaining processes reaped in %.2fs", time.monotonic() - started)
