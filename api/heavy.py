"""Heavy routes: a bound on how many run at once, so they cannot starve the rest.

With the embedded database (one single-threaded server) every query waits behind the
ones sent before it. List and analytics routes read many documents; a burst of them
would put seconds of work ahead of a health check, a sign-in or a run report. So:

- at most `HEAVY_SLOTS` heavy requests run at once per API process; the others wait
  for a slot for at most `SLOT_WAIT_S`, then get 503 with `Retry-After`;
- a heavy request that holds its slot longer than `HEAVY_LIMIT_S` (a database slow to
  answer) is abandoned with 503; these routes only read, so nothing is left half done.

The light routes (health, sign-in, keys, run reports, runs) never wait here. The
figures are in docs/consistency.md and bench/load.py measures the effect.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiohttp import web

from api.errors import error_response
from svc.core import Unavailable

T = TypeVar("T")

HEAVY_SLOTS = 4
SLOT_WAIT_S = 2.0
HEAVY_LIMIT_S = 10.0
RETRY_AFTER_S = 1
BUSY = "Too many heavy requests at once; retry shortly"
SLOW = "The database is slow to answer; retry shortly"

ORG = "/api/orgs/{slug}"
HEAVY_ROUTES: frozenset[tuple[str, str]] = frozenset(
    {
        ("GET", "/api/runs"),
        ("GET", "/api/billing"),
        ("GET", "/api/stripe/my-earnings"),
        ("GET", "/api/installs"),
        ("GET", "/api/installs/mine"),
        ("GET", "/api/installs/{id}/events"),
        ("GET", "/api/installs/{id}/run-log"),
        ("GET", "/api/installs/{id}/agent-runs"),
        ("GET", "/api/installs/{id}/security/requests"),
        ("GET", f"{ORG}/audit-log"),
        ("GET", f"{ORG}/analytics"),
    }
)


class HeavyGate:
    """The slots heavy requests share in one API process."""

    def __init__(self, slots: int = HEAVY_SLOTS, wait_s: float = SLOT_WAIT_S, limit_s: float = HEAVY_LIMIT_S):
        self.slots = asyncio.Semaphore(slots)
        self.wait_s = wait_s
        self.limit_s = limit_s

    async def run(self, call: Callable[[], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        """Run a heavy handler in a slot; 503 when no slot frees in time or the answer is too slow."""
        try:
            return await self.read(call)
        except Busy as exc:
            return busy(exc.message)

    async def read(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run one heavy read in a slot: a heavy route's handler, or a refresh of the dashboard's
        live install page (docs/dashboard.md, "Live runs"). `Busy` (a 503 with Retry-After)
        when no slot frees in time or the read is too slow."""
        try:
            async with asyncio.timeout(self.wait_s):
                await self.slots.acquire()
        except TimeoutError:
            raise Busy(BUSY) from None
        # The read runs as a task of its own and is abandoned when it is too slow: a cancel
        # alone is not enough, since the database driver may absorb it while it waits on its own
        # operation timeout (SVC_DB_TIMEOUT_SECONDS). These reads only read: nothing is half done.
        task = asyncio.ensure_future(call())
        task.add_done_callback(_settle)
        try:
            done, _ = await asyncio.wait({task}, timeout=self.limit_s)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            self.slots.release()
        if not done:
            task.cancel()
            raise Busy(SLOW)
        return task.result()


class Busy(Unavailable):
    """No heavy slot freed in time, or the read held its slot too long: 503 with Retry-After."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.retry_after = RETRY_AFTER_S  # sent as Retry-After (api/errors.py)


def _settle(task: asyncio.Future[Any]) -> None:
    """Collect an abandoned handler's outcome, so it is never reported as unretrieved."""
    if not task.cancelled():
        task.exception()


HEAVY_GATE = web.AppKey("heavy_gate", HeavyGate)


def busy(message: str) -> web.Response:
    """503 with the spec's error body and a Retry-After."""
    response = error_response(503, message)
    response.headers["Retry-After"] = str(RETRY_AFTER_S)
    return response


def is_heavy(method: str, path: str) -> bool:
    """Whether a route is bounded by the gate."""
    return (method, path) in HEAVY_ROUTES
