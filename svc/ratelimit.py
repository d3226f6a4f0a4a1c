"""Per-IP fixed-window rate limits, counted in MongoDB so every API process shares them.

Rules that share a window length share one counter document per client and
window, so a request costs one atomic `$inc` upsert per window length (one for
almost every request, two for the public generate endpoint).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError

from svc.errors import RateLimited
from svc.store import Store

EXEMPT_PATHS = frozenset({"/api/health"})


@dataclass(frozen=True)
class Rule:
    """At most `limit` requests per `window_s` seconds for requests that `applies`."""

    name: str
    limit: int
    window_s: int
    applies: Callable[[str, str], bool]


RULES: tuple[Rule, ...] = (
    Rule("all", 300, 15 * 60, lambda method, path: True),
    Rule("auth", 20, 15 * 60, lambda method, path: path.startswith("/api/auth/")),
    Rule(
        "public_generate", 5, 60 * 60,
        lambda method, path: method == "POST" and path == "/api/templates/generate/public",
    ),
)


class RateLimiter:
    """Counts requests per client IP and refuses the ones over a limit with 429."""

    def __init__(self, store: Store, multiplier: float = 1.0, rules: tuple[Rule, ...] = RULES) -> None:
        self.store = store
        self.rules = rules
        self.limits = {rule.name: max(1, math.ceil(rule.limit * multiplier)) for rule in rules}

    async def hit(self, ip: str, method: str, path: str) -> None:
        """Count one request; raise RateLimited (with Retry-After seconds) when over a limit."""
        if path in EXEMPT_PATHS:
            return
        by_window: dict[int, list[Rule]] = {}
        for rule in self.rules:
            if rule.applies(method, path):
                by_window.setdefault(rule.window_s, []).append(rule)
        now = time.time()
        results = await asyncio.gather(
            *(self._count(ip, window, rules, now) for window, rules in by_window.items())
        )
        waits = [wait for wait in results if wait is not None]
        if waits:
            raise RateLimited("Too many requests, please try again later", retry_after=max(waits))

    async def _count(self, ip: str, window_s: int, rules: list[Rule], now: float) -> int | None:
        """Increment this window's counters; the seconds to wait if any is over its limit."""
        start = int(now // window_s * window_s)
        end = start + window_s
        key = f"{ip}|{window_s}|{start}"
        update = {
            "$inc": {rule.name: 1 for rule in rules},
            "$setOnInsert": {"expiresAt": datetime.fromtimestamp(end, UTC) + timedelta(seconds=60)},
        }
        counts = await self._increment(key, update)
        if any(counts.get(rule.name, 0) > self.limits[rule.name] for rule in rules):
            return max(1, math.ceil(end - now))
        return None

    async def _increment(self, key: str, update: dict[str, object]) -> dict[str, object]:
        """Apply the upsert and return the counters after it."""
        collection = self.store.rate_limits
        try:
            counts = await collection.find_one_and_update(
                {"_id": key}, update, upsert=True, return_document=ReturnDocument.AFTER
            )
        except DuplicateKeyError:
            # Two processes inserted the same new window at once; the loser retries as an update.
            counts = await collection.find_one_and_update(
                {"_id": key}, update, return_document=ReturnDocument.AFTER
            )
        if counts is None:
            # Seen with SecantusDB under concurrent upserts: the increment is applied but the
            # document is not returned. Read it back; the count includes this request.
            counts = await collection.find_one({"_id": key})
        return counts or {}
