"""Per-IP fixed-window rate limits, counted in MongoDB so every API process shares them.

Rules that share a window length share one counter document per client and
window (`$inc` on one field per rule), so a request touches one document per
window length.

Counting every request synchronously would put a database write on every
request's path. Instead a counter is exact where it matters and cheap where it
does not:

- While this process's view of a counter (what it last read from the database
  plus what it has counted since) stays within the first half of every limit,
  the request is counted locally and the increments are flushed to MongoDB in
  one atomic `$inc` per counter shortly after (FLUSH_DELAY_S).
- Past half of any limit, or for a counter this process has not read yet, the
  request is counted synchronously: one atomic `$inc` whose result decides.

So a single process is exact, and several processes can admit more than a limit
only if, within one flush delay, their unflushed local counts together exceed
half of it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo.errors import PyMongoError

from svc.core import RateLimited, Store, increment_exactly

log = logging.getLogger(__name__)

EXEMPT_PATHS = frozenset({"/api/health"})
# The dashboard's versioned assets: cached for a year, so counting them only punishes a first visit.
STATIC_PREFIX = "/static/"
FLUSH_DELAY_S = 0.05
LOCAL_SHARE = 0.5
MAX_TRACKED = 100_000


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
        "public_generate",
        5,
        60 * 60,
        lambda method, path: method == "POST" and path == "/api/templates/generate/public",
    ),
    Rule(
        "runtime_test",
        20,
        60 * 60,
        lambda method, path: method == "POST" and path == "/api/runtime/webhook/test",
    ),
)


@dataclass
class Counter:
    """This process's view of one counter document."""

    end: float
    seen: dict[str, int] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)


class RateLimiter:
    """Counts requests per client IP and refuses the ones over a limit with 429."""

    def __init__(self, store: Store, multiplier: float = 1.0, rules: tuple[Rule, ...] = RULES) -> None:
        self.store = store
        self.rules = rules
        self.limits = {rule.name: max(1, math.ceil(rule.limit * multiplier)) for rule in rules}
        self._counters: dict[str, Counter] = {}
        self._flush_task: asyncio.Task[None] | None = None

    async def hit(self, ip: str, method: str, path: str) -> None:
        """Count one request; raise RateLimited (with Retry-After seconds) when over a limit."""
        if path in EXEMPT_PATHS or path.startswith(STATIC_PREFIX):
            return
        by_window: dict[int, list[Rule]] = {}
        for rule in self.rules:
            if rule.applies(method, path):
                by_window.setdefault(rule.window_s, []).append(rule)
        now = time.time()
        waits = []
        for window_s, rules in by_window.items():
            wait = await self._count(ip, window_s, rules, now)
            if wait is not None:
                waits.append(wait)
        if waits:
            raise RateLimited("Too many requests, please try again later", retry_after=max(waits))

    async def _count(self, ip: str, window_s: int, rules: list[Rule], now: float) -> int | None:
        """Count the request in this window; the seconds to wait if it is over a limit."""
        start = int(now // window_s * window_s)
        end = start + window_s
        key = f"{ip}|{window_s}|{start}"
        counter = self._counters.get(key)
        if counter is not None and all(self._local_ok(counter, rule) for rule in rules):
            for rule in rules:
                counter.pending[rule.name] = counter.pending.get(rule.name, 0) + 1
            self._schedule_flush()
            return None
        # Counted synchronously, together with anything this process still holds for the counter.
        increments = {rule.name: 1 for rule in rules}
        if counter is not None:
            for name, value in counter.pending.items():
                increments[name] = increments.get(name, 0) + value
            counter.pending = {}
        counts = await self._increment(key, increments, end)
        self._remember(key, end, counts)
        if any(counts.get(rule.name, 0) > self.limits[rule.name] for rule in rules):
            return max(1, math.ceil(end - now))
        return None

    def _local_ok(self, counter: Counter, rule: Rule) -> bool:
        """True while this request keeps the counter within the locally counted share."""
        known = counter.seen.get(rule.name, 0) + counter.pending.get(rule.name, 0)
        return known + 1 <= self.limits[rule.name] * LOCAL_SHARE

    def _remember(self, key: str, end: float, counts: dict[str, Any]) -> None:
        counter = self._counters.get(key)
        if counter is None:
            if len(self._counters) >= MAX_TRACKED:
                return  # untracked counters are simply counted synchronously
            counter = self._counters[key] = Counter(end)
        for name, value in counts.items():
            if name in self.limits and isinstance(value, int):
                counter.seen[name] = max(counter.seen.get(name, 0), value)

    async def _increment(self, key: str, increments: dict[str, int], end: float) -> dict[str, Any]:
        """Add to the counters atomically; returns them after the addition, this request's own
        position included (the count it is judged by, exact even when processes race to open
        the window: svc/core/exact_increment.py)."""
        expires = datetime.fromtimestamp(end, UTC) + timedelta(seconds=60)
        return await increment_exactly(self.store.rate_limits, key, increments, {"expiresAt": expires})

    def _schedule_flush(self) -> None:
        if self._flush_task is None or self._flush_task.done():
            self._flush_task = asyncio.create_task(self._flush_later())

    async def _flush_later(self) -> None:
        await asyncio.sleep(FLUSH_DELAY_S)
        await self.flush()

    async def flush(self) -> None:
        """Write every locally counted request to MongoDB and forget ended windows."""
        now = time.time()
        for key, counter in list(self._counters.items()):
            pending, counter.pending = counter.pending, {}
            if pending:
                try:
                    counts = await self._increment(key, pending, counter.end)
                except PyMongoError as exc:
                    log.warning("rate-limit flush failed: %s", type(exc).__name__)
                    for name, value in pending.items():
                        counter.pending[name] = counter.pending.get(name, 0) + value
                    continue
                self._remember(key, counter.end, counts)
            if counter.end <= now and not counter.pending:
                del self._counters[key]

    async def close(self) -> None:
        """Flush what is still counted only locally (at shut-down)."""
        if self._flush_task is not None:
            self._flush_task.cancel()
        await self.flush()
