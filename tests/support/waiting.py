"""Waiting on a condition with a deadline (never a fixed sleep).

Every poll in the suite goes through here: a test waits for what it needs (a stored status,
a request the fake received), never for a length of time. The poll interval is not a wait
for anything; it only spaces the checks. `tests/test_no_fixed_sleeps.py` keeps `sleep(` out
of the test modules.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

POLL_S = 0.1


async def wait_until(
    condition: Callable[[], Any], timeout_s: float = 60.0, interval_s: float = POLL_S
) -> Any:
    """Poll `condition` (plain, or returning an awaitable) until it returns something truthy;
    that value, or None once the deadline passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            return None
        await asyncio.sleep(interval_s)


async def eventually(
    condition: Callable[[], Any], what: str, timeout_s: float = 60.0, interval_s: float = POLL_S
) -> Any:
    """`wait_until`, failing the test with `what` when the deadline passes."""
    value = await wait_until(condition, timeout_s, interval_s)
    if not value:
        raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}")
    return value


def wait_until_sync(condition: Callable[[], Any], timeout_s: float, interval_s: float = POLL_S) -> Any:
    """`wait_until` for code outside an event loop (pytest's own hooks)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval_s)


async def wait_for(predicate: Callable[[], Awaitable[bool]], timeout_s: float = 60.0) -> bool:
    """Poll the async `predicate` until it holds (True) or the deadline passes (False)."""
    return bool(await wait_until(predicate, timeout_s))


async def wait_status(store: Any, run_id: str, status: str, timeout_s: float = 60.0) -> dict[str, Any]:
    """The pipeline run once it reaches `status`; AssertionError when it never does."""

    async def reached() -> dict[str, Any] | None:
        run = await store["pipeline_runs"].find_one({"_id": run_id})
        return run if run is not None and run["status"] == status else None

    found = await wait_until(reached, timeout_s)
    if found is None:
        raise AssertionError(f"run {run_id} never reached {status}")
    return dict(found)


async def wait_settled(
    store: Any, run_id: str, status: str = "completed", timeout_s: float = 60.0
) -> dict[str, Any]:
    """The managed run once it has reached `status` and its end has paid everything it owed
    (its run record, the counters, the newest runs: svc/runtime/settlement.py), so lists, billing
    and spend see it; AssertionError when it never does."""

    async def paid() -> dict[str, Any] | None:
        run = await store["pipeline_runs"].find_one({"_id": run_id})
        return run if run is not None and run["status"] == status and not run.get("owed") else None

    found = await wait_until(paid, timeout_s)
    if found is None:
        raise AssertionError(f"run {run_id} never reached {status} with nothing owed")
    return dict(found)
