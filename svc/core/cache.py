"""A small in-process cache with expiry, for credentials on the hot path.

Every authenticated request resolves a credential; with the embedded database a
look-up costs a millisecond or more, so resolved credentials are kept for a few
seconds. The process that revokes or changes something drops its entry at once;
other API processes sharing the database see the change within the TTL.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

CREDENTIAL_TTL_S = 2.0
MAX_ENTRIES = 10_000


class _Revoked:
    """Marks a key revoked for one TTL, so a look-up already in flight cannot re-cache it."""


REVOKED = _Revoked()


class TTLCache(Generic[K, V]):
    """Entries expire `ttl_s` after they are put; the oldest go first past `max_entries`."""

    def __init__(self, ttl_s: float = CREDENTIAL_TTL_S, max_entries: int = MAX_ENTRIES) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._entries: OrderedDict[K, tuple[float, V | _Revoked]] = OrderedDict()

    def _live(self, key: K) -> V | _Revoked | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires, value = entry
        if expires <= time.monotonic():
            del self._entries[key]
            return None
        return value

    def get(self, key: K) -> V | None:
        """The live value, or None (also for a revoked key)."""
        value = self._live(key)
        return None if isinstance(value, _Revoked) else value

    def put(self, key: K, value: V) -> None:
        """Store a value for the TTL, unless the key was revoked within the TTL."""
        if isinstance(self._live(key), _Revoked):
            return
        self._store(key, value)

    def _store(self, key: K, value: V | _Revoked) -> None:
        self._entries[key] = (time.monotonic() + self.ttl_s, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def discard(self, key: K) -> None:
        """Forget one entry (after a change; the next look-up reads the database)."""
        self._entries.pop(key, None)

    def revoke(self, key: K) -> None:
        """Forget the key and refuse to cache it again for one TTL (call before deleting it)."""
        self._store(key, REVOKED)
