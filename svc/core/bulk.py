"""Writes to several collections in one round trip: MongoDB 8.0's client-level `bulkWrite`.

A run's end owes writes to half a dozen collections (its run record, counters, the newest-runs
list, its steps, its callback). Sent one by one they cost a round trip
each; as one `bulkWrite` command they cost one, whatever their number or collections. The
command is ordered: it stops at the first failure, so a batch whose last operation clears what
the run still owes (svc/runtime/settlement.py) only clears it when everything before it landed.
It is not atomic: a batch cut short is sent again whole, so every operation in one must be
idempotent (inserts as `$setOnInsert` upserts, increments guarded by what they already applied:
`Batch.once`).

A server older than 8.0 has no such command: the same operations are then applied in order, one
collection's run at a time (correct, only slower).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from pymongo import UpdateOne
from pymongo.errors import ClientBulkWriteException, DuplicateKeyError, InvalidOperation

from svc.core.store import Document, Store

DUPLICATE_KEY = 11000  # the server's code for a write that met an existing unique key


@dataclass(frozen=True)
class Write:
    """One `update_one` on one collection."""

    collection: str
    query: Document
    change: Document
    upsert: bool = False
    # A guarded upsert (`Batch.once`): a duplicate key on it can mean "applied already".
    once: bool = False


class _Failed(Exception):
    """An operation of a batch failed: those before it landed, it and those after did not.
    `duplicate`: it met an existing document's unique key."""

    def __init__(self, index: int, cause: Exception, duplicate: bool) -> None:
        super().__init__(f"operation {index} of the batch failed: {type(cause).__name__}")
        self.index = index
        self.cause = cause
        self.duplicate = duplicate


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

    def once(
        self, collection: str, query: Document, guard: Document, change: Document, fields: Document
    ) -> None:
        """Apply `change` to the document `query` names (by `_id`) at most once, creating it with
        `fields` when missing, in ONE operation. `guard` holds until the change is applied (for
        example `{"applied": {"$ne": run_id}}`, with `change` pushing `run_id`), so a resend does
        nothing twice. When the guard fails, the upsert tries to insert a second document with the
        same `_id` and gets a duplicate key: `commit` sends the operation once more (the key may have
        come from a racing first insert, and then the change is still due) and reads a second
        duplicate key as "applied already"."""
        self.writes.append(
            Write(collection, {**query, **guard}, {**change, "$setOnInsert": fields}, upsert=True, once=True)
        )

    async def commit(self) -> None:
        """Send every operation, in order, in one round trip (more only after a duplicate key on a
        `once` operation); raises the first failure (the operations before it landed)."""
        start, resent = 0, -1
        while start < len(self.writes):
            try:
                await self._send(self.writes[start:])
                return
            except _Failed as exc:
                failed = start + exc.index
                if not (self.writes[failed].once and exc.duplicate):
                    raise exc.cause from None
                # The first duplicate key: send it again; the second: it was applied already.
                start, resent = (failed + 1, -1) if resent == failed else (failed, failed)

    async def _send(self, writes: list[Write]) -> None:
        database = self.store.db.name
        models = [
            UpdateOne(w.query, w.change, upsert=w.upsert, namespace=f"{database}.{w.collection}")
            for w in writes
        ]
        try:
            await self.store.client.bulk_write(models, ordered=True)
        except ClientBulkWriteException as exc:
            errors = cast(list[dict[str, Any]], exc.write_errors or [])
            first = min(errors, key=lambda error: int(error["idx"]), default={"idx": 0})
            raise _Failed(int(first["idx"]), exc, first.get("code") == DUPLICATE_KEY) from exc
        except InvalidOperation as exc:  # a server before 8.0: no client-level bulkWrite
            if "8.0" not in str(exc):
                raise
            for index, w in enumerate(writes):
                try:
                    await self.store[w.collection].update_one(w.query, w.change, upsert=w.upsert)
                except Exception as failure:
                    raise _Failed(index, failure, isinstance(failure, DuplicateKeyError)) from failure
