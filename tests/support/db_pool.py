"""The tests' databases, used again: each keeps its collections and indexes between tests.

A fresh database costs the embedded server about 0.1 s of CPU to create the store's indexes
(31 collections), and every one of the suite's ~2,100 tests starts an app on one. A database a
test has finished with is wiped instead: its documents are deleted, its collections and indexes
stay, and so does the store's record that they exist (`svc.core.store.SCHEMA`), so the next
app on it skips its `createIndexes`. Wiping costs about a third of creating.

A wiped database goes to a later test only once nothing of its first test can still write to
it, `QUIET_S` after its release: by then that test's install actors have stopped (each beat,
every `actors.install_actor.BEAT_S`, finds its incarnation record gone, and the copy stops),
its scheduler and spares were killed at tear-down, and its apps were closed.
"""

from __future__ import annotations

import time
import uuid
from collections import deque

from actors.install_actor import BEAT_S
from svc.core.store import SCHEMA, Document, Store

QUIET_S = 3 * BEAT_S


class DatabasePool:
    """Database names for tests: a wiped one that has been quiet long enough, or a new one."""

    def __init__(self) -> None:
        self._free: deque[tuple[str, float]] = deque()

    def take(self) -> str:
        if self._free and time.monotonic() - self._free[0][1] >= QUIET_S:
            return self._free.popleft()[0]
        return f"t_{uuid.uuid4().hex[:16]}"

    async def give_back(self, store: Store) -> None:
        """Delete every document of the store's database but the schema record; keep it for later."""
        for name in await written(store):
            await store.db[name].delete_many({})
        self._free.append((store.db.name, time.monotonic()))


async def written(store: Store) -> list[str]:
    """The collections holding a document, the schema record's aside: one aggregation over all of
    them (a test writes to a handful of the 31), not a round trip each."""
    names = [name for name in await store.db.list_collection_names() if name != SCHEMA]
    if not names:
        return []

    def first_of(name: str) -> list[Document]:
        return [{"$limit": 1}, {"$project": {"_id": 0, "name": {"$literal": name}}}]

    unions = [{"$unionWith": {"coll": name, "pipeline": first_of(name)}} for name in names[1:]]
    pipeline = first_of(names[0]) + unions
    cursor = await store.db[names[0]].aggregate(pipeline)
    return [found["name"] for found in await cursor.to_list(None)]
