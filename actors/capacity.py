"""The capacity model: what an install actor reserves on a Ray node, and waiting for placement.

An install actor declares the memory it needs (`SVC_ACTOR_MEMORY_MB`, Ray's logical `memory`
resource), asks to be spread over the nodes (`SPREAD`) and reserves no CPU: it spends its life
waiting on model providers and the database, so a CPU reservation would cap a 2-core node at two
installs while the node sits idle. Memory is what runs out first (an actor is a Python process of
roughly 100 MB), so that is what Ray counts: it places an actor on a node with that much
unreserved, spreads actors over the nodes (only because it is told to: its default packs them),
and keeps the creation of an actor that fits nowhere pending until an idle actor exits or a node
joins. Nothing overcommits a node, and Ray's OOM killer is not the admission control.

A pending actor is the queue: the runtime waits for it up to a bound
(`SVC_ACTOR_PLACEMENT_SECONDS`) instead of counting a few failed attempts, and a synchronous run
that gets no actor within the bound answers 503 with `Retry-After` (`NoRoom` is a
`RuntimeFailure`: the run service settles the run it had queued and re-raises). The pending
creation stays queued in Ray, so the retry finds the actor placed once there is room.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

from config.settings import Settings
from svc.core import RuntimeFailure

MB = 1024 * 1024
NO_ROOM = "No room for the install's worker on the cluster now; try again shortly"

T = TypeVar("T")


class NoRoom(RuntimeFailure):
    """The install's actor was not placed and ready within the bound (the cluster is full, or
    its node is still coming up)."""

    def __init__(self) -> None:
        super().__init__(NO_ROOM)


def actor_options(settings: Settings) -> dict[str, Any]:
    """The `.options(...)` an install actor is created with: its memory, no CPU, and spread over
    the nodes. Ray's default scheduler packs actors onto the local node until it is half full
    (measured: every install actor of a 3-node cluster on its head node); SPREAD places each new
    actor on the node with the fewest, among those with room for its memory."""
    return {"num_cpus": 0, "memory": settings.actor_memory_mb * MB, "scheduling_strategy": "SPREAD"}


def placement_deadline(settings: Settings | None) -> float:
    """The monotonic time by which an actor must be ready (60 s without settings)."""
    bound = settings.actor_placement_seconds if settings is not None else 60.0
    return time.monotonic() + bound


async def _awaited(call: Awaitable[T]) -> T:
    return await call


async def ready_by(call: Awaitable[T], deadline: float) -> T:
    """The answer of `call` (a Ray call on a maybe still pending actor), or NoRoom at the deadline.

    Ray queues a call to an actor that is not placed yet; the call itself is left to Ray (a
    detached actor's creation stays pending and is found placed by the next attempt).
    """
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise NoRoom
    try:
        return await asyncio.wait_for(_awaited(call), remaining)
    except TimeoutError:
        raise NoRoom from None
