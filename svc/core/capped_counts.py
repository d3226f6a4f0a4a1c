"""Capped counts as claims: one counter document per scope, taken with a conditional `$inc`.

Counting the records and then inserting lets two racing creates both see room for one.
Here the count lives in one document per scope (an org, say) and a slot is taken by
`find_one_and_update({"used": {"$lt": cap}}, {"$inc": {"used": 1}})`: one atomic step
on one document, so racing creates serialise on it. A scope's counter starts, on first
use, from the records that already exist (insert-if-absent, so two first uses agree).
Each package keeps its counters in a collection of its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError

from svc.core.store import Document


class Slots:
    """Counters in one collection: `{_id: scope, used: n}`."""

    def __init__(self, collection: AsyncCollection[Document]) -> None:
        self.collection = collection

    async def claim(self, scope: str, cap: int, existing: Callable[[], Awaitable[int]]) -> bool:
        """Take one slot of `scope`; False when `cap` are taken. `existing` counts the records."""
        for _ in range(3):
            taken = await self.collection.find_one_and_update(
                {"_id": scope, "used": {"$lt": cap}}, {"$inc": {"used": 1}}, {"_id": 1}
            )
            if taken is not None:
                return True
            if await self.collection.count_documents({"_id": scope}, limit=1):
                return False
            try:
                await self.collection.insert_one({"_id": scope, "used": await existing()})
            except DuplicateKeyError:
                pass
        return False

    async def release(self, scope: str, count: int = 1) -> None:
        """Give back `count` slots (records deleted, or a claim not used)."""
        if count > 0:
            await self.collection.update_one(
                {"_id": scope, "used": {"$gte": count}}, {"$inc": {"used": -count}}
            )

    async def forget(self, scope: str) -> None:
        """Drop the scope's counter (its records are gone)."""
        await self.collection.delete_one({"_id": scope})
