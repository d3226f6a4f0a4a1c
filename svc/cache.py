"""A small in-process cache with expiry, for credentials on the hot path.

Every authenticated request resolves a credential; with the embedded database a
look-up costs a millisecond or more, so resolved credentials are kept for a few
seconds. The process that revokes or changes something drops its entry at once;
other API processes sharing the database see the change within the TTL.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

CREDENTIAL_TTL_S = 2.0
MAX_ENTRIES = 10_000


class TTLCache(Generic[K, V]):
    """Entries expire `ttl_s` after they are put; the oldest go first past `max_entries`."""

    def __init__(self, ttl_s: float = CREDENTIAL_TTL_S, max_entries: int = MAX_ENTRIES) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K) -> V | None:
        """The live value, or None."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires, value = entry
        if expires <= time.monotonic():
            del self._entries[key]
            return None
        return value

    def put(self, key: K, value: V) -> None:
        """Store a value for the TTL."""
        self._entries[key] = (time.monotonic() + self.ttl_s, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def discard(self, key: K) -> None:
        """Forget one entry (after a revocation or a change)."""
        self._entries.pop(key, None)

    def discard_where(self, predicate: Callable[[V], bool]) -> None:
        """Forget every entry whose value matches."""
        for key in [key for key, (_, value) in self._entries.items() if predicate(value)]:
            del self._entries[key]
