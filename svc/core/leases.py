"""Named leases in MongoDB: at most one holder at a time, taken over once the holder goes quiet.

A long-lived loop that must run once per deployment (the scheduler) may have more than
one copy alive: Ray restarts a crashed actor, and a raylet crash can leave the old copy
running beside the new one. Each copy holds a random `holder` id and calls `hold()`
before each round of work: the call renews the lease when this copy holds it, takes it
when it has expired, and otherwise answers False, so the other copies stand by. A holder
that stops renewing (killed, frozen, cut off from the database) loses the lease after
`ttl_s`.

Expiry uses the holder's clock; copies on hosts whose clocks differ by a good part of the
TTL could overlap for that long, so callers keep their own work idempotent (the
scheduler's fires are claimed one by one anyway): the lease keeps a second loop idle,
it is not the only guard.
"""

from __future__ import annotations

from datetime import timedelta

from pymongo.errors import DuplicateKeyError

from svc.core.clock import utcnow
from svc.core.store import Document, Store

COLLECTION = "leases"


class Lease:
    """One holder's view of a named lease."""

    def __init__(self, store: Store, name: str, holder: str, ttl_s: float) -> None:
        self.store = store
        self.name = name
        self.holder = holder
        self.ttl = timedelta(seconds=ttl_s)

    async def hold(self) -> bool:
        """Renew the lease if this holder has it, take it if it is free or expired: one write.

        False while another holder's lease runs. The upsert's insert meets the unique `_id`
        when another holder's lease exists and has not expired.
        """
        now = utcnow()
        try:
            await self.store[COLLECTION].update_one(
                {"_id": self.name, "$or": [{"holder": self.holder}, {"expiresAt": {"$lte": now}}]},
                {"$set": {"holder": self.holder, "expiresAt": now + self.ttl, "renewedAt": now}},
                upsert=True,
            )
        except DuplicateKeyError:
            return False
        return True

    async def release(self) -> None:
        """Give the lease up now, if this holder has it (a finished one-off job)."""
        await self.store[COLLECTION].delete_one({"_id": self.name, "holder": self.holder})

    async def current(self) -> Document | None:
        """The lease's document: who holds it and until when (operators, tests)."""
        return await self.store[COLLECTION].find_one({"_id": self.name})
