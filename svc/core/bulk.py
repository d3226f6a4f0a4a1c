"""Writes to several collections in one round trip: MongoDB 8.0's client-level `bulkWrite`.

A run's end owes writes to half a dozen collections (its run record, counters, the newest-runs
list, the install's `lastRunAt`, its steps, its callback). Sent one by one they cost a round trip
each; as one `bulkWrite` command they cost one, whatever their number or collections. The
command is ordered: it stops at the first failure, so a batch whose last operation clears what
the run still owes (svc/runtime/settlement.py) only clears it when everything before it landed.
It is not atomic: a batch cut short is sent again whole, so every operation in one must be
idempotent (inserts as `$setOnInsert` upserts, increments guarded by what they already applied).

A server older than 8.0 has no such command: the same operations are then applied in order, one
collection's run at a time (correct, only slower).
"""

from __future__ import annotations

from dataclasses import dataclass

from pymongo import UpdateOne
from pymongo.errors import InvalidOperation

from svc.core.store import Document, Store


@dataclass(frozen=True)
class Write:
    """One `update_one` on one collection."""

    collection: str
    query: Document
    change: Document
    upsert: bool = False


class Batch:
    """Operations on any collections, committed together (in order) by `commit`."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.writes: list[Write] = []

    def __len__(self) -> int:
        return len(self.writes)

    def put(self, collection: str, doc: Document) -> None:
        """Insert `doc` unless a document with its `_id` exists (idempotent: a resend changes nothing)."""
        fields = {k: v for k, v in doc.items() if k != "_id"}
        self.update(collection, {"_id": doc["_id"]}, {"$setOnInsert": fields}, upsert=True)

    def update(self, collection: str, query: Document, change: Document, upsert: bool = False) -> None:
        """One `update_one`."""
        self.writes.append(Write(collection, query, change, upsert))

    def extend(self, other: Batch) -> None:
        """Append another batch's operations (after this one's)."""
        self.writes.extend(other.writes)

    async def commit(self) -> None:
        """Send every operation, in order, in one round trip; raises on the first that fails."""
        if not self.writes:
            return
        database = self.store.db.name
        models = [
            UpdateOne(w.query, w.change, upsert=w.upsert, namespace=f"{database}.{w.collection}")
            for w in self.writes
        ]
        try:
            await self.store.client.bulk_write(models, ordered=True)
        except InvalidOperation as exc:  # a server before 8.0: no client-level bulkWrite
            if "8.0" not in str(exc):
                raise
            for w in self.writes:
                await self.store[w.collection].update_one(w.query, w.change, upsert=w.upsert)
