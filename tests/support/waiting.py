"""Waiting on a condition with a deadline (never a fixed sleep)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any


async def wait_for(predicate: Callable[[], Awaitable[bool]], timeout_s: float = 60.0) -> bool:
    """Poll `predicate` every 0.1 s until it holds (True) or the deadline passes (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(0.1)
    return False


async def wait_status(store: Any, run_id: str, status: str, timeout_s: float = 60.0) -> dict[str, Any]:
    """The pipeline run once it reaches `status`; AssertionError when it never does."""
    found: dict[str, Any] = {}

    async def reached() -> bool:
        run = await store["pipeline_runs"].find_one({"_id": run_id})
        if run is not None and run["status"] == status:
            found.update(run)
            return True
        return False

    if not await wait_for(reached, timeout_s):
        raise AssertionError(f"run {run_id} never reached {status}")
    return found
