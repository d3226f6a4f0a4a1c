"""InstallActor: one Ray actor per install with work, the home of the install's runs.

Named `install:<id>` in the `svc` namespace and detached, so any API process finds the same
actor. It is a thin Ray wrapper around an `InstallHost` (svc/runtime/host.py), which holds the
runs in memory and applies every command through the run ledger: Ray calls stay here, the state
logic stays testable without Ray (Ray Serve's `ActorReplicaWrapper` pattern).

Its constructor reads the deployment's current configuration (actors/deployment.py), builds the
host from the composition root, and starts recovery and the clock: a restarted actor takes the
install over, resumes the runs its predecessor was running from their journals, and idles out
without being called. Between runs, an actor whose configuration is older than the published one,
or that a newer copy superseded, leaves with `ray.actor.exit_actor()` (never `ray.kill` on its
own handle, which after a node crash names the healthy new copy); it marks itself leaving first,
so a command that arrives meanwhile is told to ask the next copy instead of being lost.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from datetime import timedelta
from typing import Any

import ray

from actors import deployment
from plugins.egress import tls_context
from plugins.tracing import sdk as tracing_sdk
from svc.core import (
    Accepted,
    AskAgain,
    Cancel,
    Cancelled,
    Continue,
    Continued,
    RunOutcome,
    StartRun,
    Store,
    Vault,
    Watched,
    WatchEvents,
)
from svc.runtime import (
    InstallHost,
    claim_spare,
    forget_spare,
    incarnation_holder,
    leave_install,
    register_spare,
    release_spare,
    spare_entry,
)
from svc.wiring import build_host, dropped_spans, preload_host

log = logging.getLogger(__name__)

BEAT_S = 5.0
# A holder whose beat is this old is gone (svc/jobs.py's ACTOR_GONE_AFTER): a spare may adopt.
ACTOR_GONE_AFTER_S = 30.0
APP_NAME = "svc-actor"  # how the database names this process kind's connections


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)
class InstallActor:
    """Owns one install's runs (see the module docstring). Created for an install (`install:<id>`),
    or as a spare of the warm pool (`install_id` None, actors/pool.py) that adopts one later."""

    def __init__(self, install_id: str | None, deployment_id: str) -> None:
        config = deployment.current(deployment_id)
        if config is None:
            raise RuntimeError(f"no configuration published for deployment {deployment_id}")
        self.deployment_id = deployment_id
        self.config_version = config.version
        self.settings = config.settings
        self.vault = Vault(list(config.vault_keys))
        self.store = Store.connect(config.mongodb_uri, self.settings.db_timeout_seconds, appname=APP_NAME)
        context = ray.get_runtime_context()
        self.name: str = context.get_actor_name() or ""
        self.node: str = context.get_node_id()
        tracing_sdk.setup(  # this process's traces (tracing, #33)
            self.settings.tracing,
            "install_actor",
            node=self.node,
            on_dropped=dropped_spans(self.store, "install_actor"),
        )
        self.install_id: str | None = None
        self.host: InstallHost | None = None
        if install_id is not None:
            self._serve(install_id)
        self.leaving = False
        self._wake = asyncio.Event()
        loop = asyncio.get_running_loop()
        # The TLS context every outbound client shares (the CA bundle, 45-90 ms of CPU) is built
        # now, beside the recovery, not in the first run's first model call: a spare has it ready
        # before it adopts an install.
        self._tls = loop.run_in_executor(None, tls_context)
        self._recovered = loop.create_task(self._recover() if install_id else self._wait_as_spare())
        self._watcher = loop.create_task(self._watch())

    def _serve(self, install_id: str) -> InstallHost:
        self.install_id = install_id
        self.host = build_host(self.settings, self.store, self.vault, install_id)
        return self.host

    async def _wait_as_spare(self) -> None:
        """A spare registers in the pool; one Ray restarted after it had adopted an install serves
        that install again (its pool record says which)."""
        entry = await spare_entry(self.store, self.name)
        if entry is not None and entry.get("state") == "adopted" and entry.get("install"):
            self._serve(entry["install"])
            await self._recover()
            return
        # Ready before it is adoptable: what a host needs is imported and the TLS context built.
        await asyncio.to_thread(preload_host)
        await self._tls
        await register_spare(self.store, self.name, self.deployment_id, self.node)

    async def adopt(self, install_id: str) -> str | None:
        """Become the actor of `install_id` (a spare's one job); None when it did (or already had),
        else the name of the actor that holds the install ("" when this spare was taken)."""
        await self._recovered
        if self.install_id is not None:
            return None if self.install_id == install_id else ""
        if not await claim_spare(self.store, self.name, install_id):
            return ""
        host = self._serve(install_id)
        stale = timedelta(seconds=ACTOR_GONE_AFTER_S)
        if not await host.recover(self.name, only_if_free=stale, node=self.node):
            self.install_id, self.host = None, None
            await release_spare(self.store, self.name)
            holder = await incarnation_holder(self.store, install_id)
            return str((holder or {}).get("actor") or "")
        self._wake.set()
        return None

    # ---- commands ------------------------------------------------------------------------------

    async def ready(self) -> bool:
        """True once recovered and current; False while this copy is leaving, or a spare that serves
        no install yet (ask again later)."""
        await self._recovered
        return self.host is not None and not await self._should_leave()

    async def run(self, command: StartRun, wait_s: float) -> RunOutcome | AskAgain:
        """Start a queued run (idempotent by run id) and wait up to `wait_s` for its end or gate."""
        if not await self.ready():
            return AskAgain()
        assert self.host is not None
        return await self.host.run(command, wait_s)

    async def start(self, command: StartRun) -> Accepted | AskAgain:
        """Start a queued run without waiting (webhook, schedule, retry, wait: false)."""
        if not await self.ready():
            return AskAgain()
        assert self.host is not None
        return await self.host.start(command)

    async def cancel(self, command: Cancel) -> Cancelled | AskAgain:
        """Cancel a run of this install."""
        await self._recovered
        if self.host is None:
            return AskAgain()
        return await self.host.cancel(command)

    async def resume(self, command: Continue) -> Continued | AskAgain:
        """Continue a paused run from its gate."""
        if not await self.ready():
            return AskAgain()
        assert self.host is not None
        return await self.host.resume(command)

    async def events(self, command: WatchEvents) -> Watched:
        """A run's events from memory while this actor holds it (a long poll)."""
        await self._recovered
        if self.host is None:
            return Watched([], live=False)
        return await self.host.events(command)

    async def status(self) -> dict[str, Any]:
        """Active and paused runs, idle time, incarnation and pid (tests and operators)."""
        await self._recovered
        host = self.host
        return {
            "install": self.install_id,
            "name": self.name,
            "node": self.node,
            "active": sorted(run_id for run_id, live in host.live.items() if live.outcome is None)
            if host
            else [],
            "paused": sorted(host.paused) if host else [],
            "idleSeconds": time.monotonic() - host.last_used if host else 0.0,
            "incarnation": host.incarnation if host else None,
            "configVersion": self.config_version,
            "pid": os.getpid(),
            "leaving": self.leaving,
        }

    # ---- the clock -----------------------------------------------------------------------------

    async def _recover(self) -> None:
        """Recover until it succeeds: a database that does not answer yet delays the actor's first
        command, it does not leave a copy that fails every command for its whole life."""
        assert self.host is not None
        delay = 0.1
        while True:
            try:
                await self.host.recover(self.name, node=self.node)
                return
            except Exception as exc:
                log.warning("install actor recovery failed, trying again: %s", type(exc).__name__)
                await asyncio.sleep(delay)
                delay = min(delay * 2, BEAT_S)

    async def _should_leave(self) -> bool:
        """Leave when leaving already, or idle with an older configuration than the published one."""
        if self.leaving:
            return True
        if self.host is not None and self.host.busy:
            return False
        # One read of the configuration's version in the cluster's key-value store per command (a
        # few bytes, about a millisecond): a command right after a new configuration was published
        # already meets a fresh actor. A read that fails leaves this copy as it is (it is current
        # as far as anyone can tell).
        try:
            published = await asyncio.to_thread(deployment.current_version, self.deployment_id)
        except Exception as exc:
            log.warning("the published configuration could not be read: %s", type(exc).__name__)
            return self.leaving
        busy = self.host is not None and self.host.busy
        if published is not None and published != self.config_version and not busy:
            log.info("configuration changed; this install actor leaves for a fresh one")
            self.leaving = True
            self._wake.set()
        return self.leaving

    async def _watch(self) -> None:
        """The clock, from the constructor: beat, leave when superseded, idle, or older than the
        configuration, and only between runs. No single failure stops it: each beat and each check
        is guarded and logged, and the loop goes on."""
        idle_limit = self.settings.actor_idle_seconds
        period = max(0.05, min(BEAT_S, idle_limit / 4))
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), period)
            except TimeoutError:
                pass
            self._wake.clear()
            if self.host is None:  # a spare: it only leaves when its configuration is old
                try:
                    if await self._should_leave():
                        await self._leave(idle=False)
                except Exception as exc:
                    log.warning("spare actor could not check its configuration: %s", type(exc).__name__)
                continue
            try:
                await self._recovered
                current = await self.host.tick()
            except Exception as exc:  # a database blip must not stop the clock
                log.warning("install actor beat failed: %s", type(exc).__name__)
                continue
            if not current:
                log.warning("a newer copy of this install's actor took over; this copy stops")
                self.leaving = True
                self.host.stop_all()
                ray.actor.exit_actor()
            try:
                idle = time.monotonic() - self.host.last_used >= idle_limit
                if not self.host.busy and (idle or await self._should_leave()):
                    await self._leave(idle)
            except Exception as exc:
                log.warning("install actor could not decide whether to leave: %s", type(exc).__name__)

    async def _leave(self, idle: bool) -> None:
        """Leave between runs: marked leaving first, so a command that arrives now asks the next copy."""
        self.leaving = True
        await asyncio.sleep(0)  # a command already past `ready` has its run spawned by now
        if self.host is not None and self.host.busy:  # one did: stay for it
            self.leaving = False
            return
        try:  # said, so the sweeper need not wait for this copy's beat to age
            if self.host is not None and self.install_id is not None:
                await leave_install(self.store, self.install_id, self.host.incarnation)
            await forget_spare(self.store, self.name)
        except Exception as exc:
            log.warning("could not record the actor's leaving: %s", type(exc).__name__)
        log.info("install actor leaving (idle: %s)", idle)
        ray.actor.exit_actor()
