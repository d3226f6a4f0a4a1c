"""The warm pool on the cluster: spare install actors per node, and finding an install's actor.

`PoolKeeper` (run by the deployment's scheduler actor each tick) keeps `SVC_ACTOR_SPARES` waiting
spares on every alive node: each is an `InstallActor` with no install, named
`spare:<deployment>:<id>`, pinned to its node, detached and restarted by Ray like any install
actor. The registry of what each spare is lives in MongoDB (svc/runtime/pool.py).

`Finder` is how an API process reaches an install's actor: the warm handle it remembers, the
actor named `install:<id>`, the actor the install's incarnation record names (a spare that
adopted it), a waiting spare that adopts it now, and only then a new actor (a process start).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors import capacity
from actors.install_actor import ACTOR_GONE_AFTER_S, InstallActor
from config.settings import Settings
from svc.core import Store, aware, utcnow
from svc.runtime import forget_spare, incarnation_holder, spare_counts, spare_names, waiting_spares

log = logging.getLogger(__name__)

NAMESPACE = "svc"
CREATE_PER_TICK = 4  # spares started per tick at most (a cold cluster is filled over a few ticks)
STARTING_FOR_S = 120.0  # a spare not registered by then is counted as never started


def spare_name(deployment: str) -> str:
    return f"spare:{deployment}:{uuid.uuid4().hex[:12]}"


class PoolKeeper:
    """Tops every alive node up to `settings.actor_spares` waiting spares (the scheduler's job)."""

    def __init__(self, store: Store, settings: Settings, deployment: str) -> None:
        self.store = store
        self.settings = settings
        self.deployment = deployment
        # Spares started and not registered yet, by name: (node, when). A spare takes seconds to
        # start; counting these keeps the keeper from starting more meanwhile.
        self._starting: dict[str, tuple[str, float]] = {}

    async def tick(self) -> int:
        """Start the spares that are missing; how many were started."""
        wanted = self.settings.actor_spares
        if wanted <= 0:
            return 0
        have = await spare_counts(self.store, self.deployment)
        registered = await spare_names(self.store, self.deployment)
        now = time.monotonic()
        self._starting = {
            name: (node, at)
            for name, (node, at) in self._starting.items()
            if name not in registered and now - at < STARTING_FOR_S
        }
        for node, _ in self._starting.values():
            have[node] = have.get(node, 0) + 1
        nodes = await asyncio.to_thread(_alive_nodes)
        started = 0
        for node in nodes:
            for _ in range(max(0, wanted - have.get(node, 0))):
                if started >= CREATE_PER_TICK:
                    return started
                self._starting[self._start(node)] = (node, now)
                started += 1
        return started

    def _start(self, node: str) -> str:
        """Start one spare on `node` (from the actor's own thread: Ray submits creations made
        there); its name."""
        name = spare_name(self.deployment)
        options = {
            **capacity.actor_options(self.settings),
            "scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False),
        }
        InstallActor.options(  # type: ignore[attr-defined]
            name=name, namespace=NAMESPACE, lifetime="detached", **options
        ).remote(None, self.deployment)
        return name


def _alive_nodes() -> list[str]:
    return [n["NodeID"] for n in ray.nodes() if n.get("Alive")]


class Finder:
    """Finds (or has adopted, or starts) an install's actor, for one API process."""

    def __init__(
        self, store: Store | None, deployment: str, spares: bool, create: Callable[[str], Any]
    ) -> None:
        self.store = store
        self.deployment = deployment
        self.spares = spares
        self.create = create

    async def find(self, install_id: str) -> Any:
        """The install's actor: named, named by its incarnation record, an adopted spare, or new."""
        actor = await asyncio.to_thread(by_name, f"install:{install_id}")
        if actor is not None or self.store is None:
            return actor or await asyncio.to_thread(self.create, install_id)
        actor = await self._holder(install_id)
        if actor is None and self.spares:
            actor = await self._adopted(install_id)
        return actor or await asyncio.to_thread(self.create, install_id)

    async def existing(self, install_id: str) -> Any:
        """The install's actor if one lives (never starts or adopts one)."""
        actor = await asyncio.to_thread(by_name, f"install:{install_id}")
        if actor is None and self.store is not None:
            actor = await self._holder(install_id)
        return actor

    async def _holder(self, install_id: str) -> Any:
        assert self.store is not None
        record = await incarnation_holder(self.store, install_id)
        if record is None or record.get("gone") or not record.get("actor"):
            return None
        if aware(record["seenAt"]) < utcnow() - timedelta(seconds=ACTOR_GONE_AFTER_S):
            return None
        return await asyncio.to_thread(by_name, record["actor"])

    async def _adopted(self, install_id: str) -> Any:
        """A waiting spare that adopts the install now (or the actor that turned out to hold it)."""
        assert self.store is not None
        for entry in await waiting_spares(self.store, self.deployment):
            spare = await asyncio.to_thread(by_name, entry["_id"])
            if spare is None:
                await forget_spare(self.store, entry["_id"])  # its actor is gone for good
                continue
            try:
                holder = await spare.adopt.remote(install_id)
            except ray.exceptions.RayError:
                continue
            if holder is None:
                return spare
            if holder:  # another copy holds the install: that is its actor
                return await asyncio.to_thread(by_name, holder)
        return None


def by_name(name: str) -> Any:
    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return None
