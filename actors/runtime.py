"""Connects the process to Ray, and runs installs' work in their actors.

Every `ray.*` call of the API process goes through `RayRuntime`, so the rest of
the code sees only the `svc.ports.Runtime` protocol. Connecting publishes the
deployment's configuration (its settings without a secret) in Ray's key-value
store; install actors are created with `(install_id, deployment_id)` only and read it
from there, and the secrets from their node (actors/deployment.py). Every command for
a run goes to the install's actor; an actor that cannot be started or reached is a
`RuntimeFailure` (503 on the sync route, a retried hand-over for queued runs), never a hang.
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
from dataclasses import replace
from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError, RayError

from actors import capacity, deployment
from actors.install_actor import InstallActor
from actors.pool import Finder
from config.settings import Settings
from plugins import tracing
from svc.core import (
    Accepted,
    AskAgain,
    Cancel,
    Cancelled,
    Continue,
    Continued,
    RunOutcome,
    RuntimeFailure,
    StartRun,
    Store,
    Watched,
    WatchEvents,
)
from svc.runtime import NOT_STARTED as WORKER_NOT_STARTED
from svc.subprocesses import Reaper

log = logging.getLogger(__name__)

PING_TIMEOUT_S = 5.0
NAMESPACE = "svc"
NOT_STARTED = f"{WORKER_NOT_STARTED}; try again shortly"
STOPPED = "The install's worker stopped during the run"


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
        store: Store | None = None,
    ) -> None:
        self.address = address
        self.mongodb_uri = mongodb_uri
        self.settings = settings
        self.vault_keys = vault_keys or []
        self._owned = False
        self._reaper: Reaper | None = None
        # Handles of actors that answered recently, so a warm run skips the readiness round trip.
        self._warm: dict[str, tuple[Any, float]] = {}
        self.deployment_id = deployment.deployment_id(settings, mongodb_uri) if settings is not None else ""
        # A Ray on this machine: its actors read the secrets from a file this process writes.
        self.local = deployment.on_this_machine(address or os.environ.get("RAY_ADDRESS"))
        spares = settings is not None and settings.actor_spares > 0
        # How an install's actor is found: by name, by its incarnation record, a spare, or new.
        self.finder = Finder(store, self.deployment_id, spares, self._actor)

    def publish(self) -> None:
        """Make this process's configuration the deployment's current one (actors follow it)."""
        if self.settings is not None:
            deployment.publish(self._config(), local=self.local)

    def _config(self) -> deployment.DeploymentConfig:
        assert self.settings is not None
        return deployment.DeploymentConfig(self.settings, self.mongodb_uri, tuple(self.vault_keys))

    def start(self) -> None:
        """Connect (joining a Ray this process already has, if any).

        Called on the main thread: a local Ray's processes are tied to the thread
        that starts them and die with it. Their children (workers, agents) are
        ended by a `Reaper` as soon as this process has gone, however it went.
        """
        if ray.is_initialized():
            log.info("using the Ray connection this process already has")
            self.publish()
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
                )
        except BaseException:
            if ray.is_initialized():
                ray.shutdown()
            if reaper is not None:
                reaper.close()
            raise
        self._reaper = reaper
        self._owned = True
        self.publish()
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
            **capacity.actor_options(self.settings),
        ).remote(install_id, self.deployment_id)

    async def _ready_actor(self, install_id: str, trust_warm: bool = True) -> Any:
        """The install's actor once it answers; waits out a restart or a copy that is leaving,
        replaces a dead one; NoRoom (a RuntimeFailure) when none answers within the placement bound."""
        warm = self._warm.get(install_id)
        if trust_warm and warm is not None and time.monotonic() - warm[1] < self._warm_ttl():
            return warm[0]
        # Wait for placement up to a deadline, not a number of attempts: a pending actor is
        # queued for room on the cluster (actors/capacity.py); NoRoom is a RuntimeFailure (503).
        deadline = capacity.placement_deadline(self.settings)
        delay = 0.05
        while time.monotonic() < deadline:
            try:
                actor = await self.finder.find(install_id)
                if await capacity.ready_by(actor.ready.remote(), deadline):
                    self._warm[install_id] = (actor, time.monotonic())
                    return actor
            except ActorDiedError as exc:
                if exc.actor_init_failed:  # its constructor failed: asking again will not help
                    log.warning("install actor could not be constructed")
                    break
            except (ActorUnavailableError, RayActorError):
                pass
            except capacity.NoRoom:
                self._warm.pop(install_id, None)
                raise
            except RayError as exc:
                log.warning("install actor did not get ready: %s", type(exc).__name__)
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
        self._warm.pop(install_id, None)
        if time.monotonic() >= deadline:
            raise capacity.NoRoom
        raise RuntimeFailure(NOT_STARTED)

    async def _command(self, install_id: str, method: str, *args: Any, trust_warm: bool = True) -> Any:
        """Send one typed command to the install's actor, as a client span whose trace context a
        command that starts work (StartRun, Continue) carries in its `trace`: the actor's run joins
        the caller's trace (tracing, #33)."""
        with tracing.handover_span(method, install_id) as carrier:
            if carrier:
                args = tuple(
                    replace(arg, trace=carrier) if isinstance(arg, StartRun | Continue) else arg
                    for arg in args
                )
            return await self._send(install_id, method, *args, trust_warm=trust_warm)

    async def _send(self, install_id: str, method: str, *args: Any, trust_warm: bool = True) -> Any:
        """Send one typed command to the install's actor; a copy that is leaving (`AskAgain`) is
        asked again once a fresh one answers. A copy that dies during the command (a remembered
        handle of a copy gone since, or a copy on a node that has just gone) is replaced and asked
        once more: commands are idempotent by run id, and the live copy's recovery resumed what
        died with the old one, so the caller gets the run's real end. RuntimeFailure when the
        actor cannot be started, or dies again."""
        deadline = capacity.placement_deadline(self.settings)
        resent = False
        while True:
            actor = await self._ready_actor(install_id, trust_warm)
            try:
                answer = await getattr(actor, method).remote(*args)
            except (RayActorError, ActorDiedError, ActorUnavailableError) as exc:
                self._warm.pop(install_id, None)
                if not resent:
                    resent, trust_warm = True, False
                    continue
                log.warning("install actor failed during %s: %s", method, type(exc).__name__)
                raise RuntimeFailure(STOPPED) from None
            except RayError as exc:
                self._warm.pop(install_id, None)
                log.warning("install actor could not carry out %s: %s", method, type(exc).__name__)
                raise RuntimeFailure(NOT_STARTED) from None
            if not isinstance(answer, AskAgain):
                self._warm[install_id] = (actor, time.monotonic())
                return answer
            self._warm.pop(install_id, None)
            trust_warm = False
            if time.monotonic() >= deadline:
                raise RuntimeFailure(NOT_STARTED)
            await asyncio.sleep(0.05)

    async def run(self, install_id: str, command: StartRun, wait_s: float) -> RunOutcome:
        """Start a queued run in the install's actor and wait up to `wait_s`; RuntimeFailure if it
        cannot start or dies (its restarted copy resumes the run)."""
        answer: RunOutcome = await self._command(install_id, "run", command, wait_s)
        return answer

    def _warm_ttl(self) -> float:
        """How long a handle counts as warm: well within the actor's idle exit."""
        idle = self.settings.actor_idle_seconds if self.settings is not None else 300.0
        return min(30.0, idle / 2)

    async def submit(self, install_id: str, command: StartRun) -> Accepted:
        """Hand a queued run to the install's actor without waiting for it to finish (checked
        live: nobody waits on the outcome to notice a dead actor); RuntimeFailure when it
        cannot be handed over (the job runner tries again)."""
        answer: Accepted = await self._command(install_id, "start", command, trust_warm=False)
        return answer

    async def cancel(self, install_id: str, command: Cancel) -> Cancelled:
        """Ask the install's actor to cancel a run."""
        answer: Cancelled = await self._command(install_id, "cancel", command)
        return answer

    async def resume(self, install_id: str, command: Continue) -> Continued:
        """Ask the install's actor to continue a paused run."""
        answer: Continued = await self._command(install_id, "resume", command)
        return answer

    async def wake(self, install_id: str) -> None:
        """Make sure the install's actor lives (its recovery adopts what a dead copy left)."""
        await self._ready_actor(install_id, trust_warm=False)

    async def events(self, install_id: str, command: WatchEvents) -> Watched:
        """A run's events from the actor holding it; `live` False when no actor of the install
        lives (never starts one just to watch)."""
        warm = self._warm.get(install_id)
        actor = warm[0] if warm is not None else await self.finder.existing(install_id)
        if actor is None:
            return Watched([], live=False)
        try:
            answer: Watched = await actor.events.remote(command)
        except RayError:
            self._warm.pop(install_id, None)
            return Watched([], live=False)
        return answer

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
            if self._reaper is not None and self.settings is not None:
                deployment.forget(self._config())  # the Ray this process started is gone, its actors too
        self._owned = False
        if self._reaper is not None:
            started = time.monotonic()
            self._reaper.close()
            self._reaper = None
            log.debug("local Ray's remaining processes reaped in %.2fs", time.monotonic() - started)
