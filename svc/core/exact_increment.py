"""Add to a document's counters and learn their values after the addition, exactly, even when
several processes create the document at once: a rate-limit window's hits
(svc/identity/ratelimit.py) and an install's draft numbers (svc/runtime/pipelines.py).

`find_one_and_update(..., upsert=True)` is the obvious way, but SecantusDB (the embedded
server) answers some of several upserts racing to create one document with no document: the
increment is applied, its result unknown, and reading the document back counts later additions
too. So: an update of the existing document (the common case, one round trip), else an insert;
the loser of an insert race updates the winner's document.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pymongo import ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError

from svc.core.store import Document


async def add(
    collection: AsyncCollection[Document],
    doc_id: Any,
    increments: Mapping[str, int],
    on_insert: Mapping[str, Any] | None = None,
) -> Document:
    """`$inc` the fields of the document `doc_id` (created with `on_insert` and the increments
    when it does not exist); the document right after this addition."""
    update = {"$inc": dict(increments)}
    after = await _update(collection, doc_id, update)
    if after is not None:
        return after
    created = {"_id": doc_id, **(on_insert or {}), **increments}
    try:
        await collection.insert_one(created)
    except DuplicateKeyError:
        after = await _update(collection, doc_id, update)
        if after is not None:
            return after
        raise  # created and gone again at once (a TTL sweep): the caller's own retry decides
    return created


async def _update(collection: AsyncCollection[Document], doc_id: Any, update: Document) -> Document | None:
    return await collection.find_one_and_update({"_id": doc_id}, update, return_document=ReturnDocument.AFTER)
