"""Connects the process to Ray, and runs installs' work in their actors.

Every `ray.*` call of the API process goes through `RayRuntime`, so the rest of
the code sees only the `svc.ports.Runtime` protocol. Workers get the database
URI in their environment, so actors reach the same MongoDB as the API.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

from actors.install_actor import InstallActor
from config.settings import Settings
from svc.core import RuntimeFailure

log = logging.getLogger(__name__)

PING_TIMEOUT_S = 5.0
READY_ATTEMPTS = 30
NAMESPACE = "svc"


def actor_name(install_id: str) -> str:
    """The Ray name of an install's actor."""
    return f"install:{install_id}"


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
        self._background: set[asyncio.Task[Any]] = set()
        # Handles of actors that answered recently, so a warm run skips the readiness round trip.
        self._warm: dict[str, tuple[Any, float]] = {}

    def start(self) -> None:
        """Connect (joining a Ray this process already has, if any).

        Called on the main thread: a local Ray's processes are tied to the thread
        that starts them and die with it.
        """
        if ray.is_initialized():
            log.info("using the Ray connection this process already has")
            return
        ray.init(
            address=self.address,
            namespace=NAMESPACE,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            runtime_env={"env_vars": {"SVC_MONGODB_URI": self.mongodb_uri}},
        )
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
        ).remote(install_id, self.settings, self.mongodb_uri, self.vault_keys)

    async def _ready_actor(self, install_id: str, trust_warm: bool = True) -> Any:
        """The install's actor once it answers; waits out a restart, replaces a dead one."""
        warm = self._warm.get(install_id)
        if trust_warm and warm is not None and time.monotonic() - warm[1] < self._warm_ttl():
            return warm[0]
        delay = 0.1
        for _ in range(READY_ATTEMPTS):
            actor = await asyncio.to_thread(self._actor, install_id)
            try:
                await actor.ready.remote()
                self._warm[install_id] = (actor, time.monotonic())
                return actor
            except (ActorUnavailableError, ActorDiedError, RayActorError):
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        raise RuntimeFailure("The install's worker could not be started")

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
            ray.shutdown()
        self._owned = False
