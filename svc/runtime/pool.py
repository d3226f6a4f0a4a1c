"""The warm pool's registry: spare install actors, started ahead, each adopting one install.

A cold install used to pay a process start on its first run (about 1.4 s). Spares are install
actors started ahead of need on each node (actors/pool.py keeps `SVC_ACTOR_SPARES` per node);
the first command for an install with no actor claims one here and the spare adopts the install:
it takes the install's incarnation record over (svc/runtime/ledger.py, `adopt_install`, only when no
live copy holds it) and recovers it as any new copy does. From then on the spare is that install's
actor, found through the incarnation record (which names the actor) rather than a Ray name, and it
leaves when idle like any other. So there is still exactly one actor per active install.

One document per spare in `actor_pool`: `{_id: actor name, deployment, node, state, install}`;
`state` goes spare -> adopted, each step one conditional write.
"""

from __future__ import annotations

from svc.core import Document, Store, utcnow

POOL = "actor_pool"


async def register(store: Store, name: str, deployment: str, node: str) -> None:
    """A spare is up and waiting (its constructor; again after Ray restarted it)."""
    await store[POOL].update_one(
        {"_id": name},
        {
            "$setOnInsert": {"deployment": deployment, "state": "spare", "since": utcnow()},
            "$set": {"node": node, "seenAt": utcnow()},
        },
        upsert=True,
    )


async def claim(store: Store, name: str, install_id: str) -> bool:
    """The spare `name` is taken for `install_id` (one caller wins)."""
    done = await store[POOL].update_one(
        {"_id": name, "state": "spare"},
        {"$set": {"state": "adopted", "install": install_id, "since": utcnow()}},
    )
    return done.modified_count == 1


async def release(store: Store, name: str) -> None:
    """A claimed spare whose adoption was refused (the install is held already) waits again."""
    await store[POOL].update_one(
        {"_id": name, "state": "adopted"}, {"$set": {"state": "spare"}, "$unset": {"install": ""}}
    )


async def forget(store: Store, name: str) -> None:
    """The actor left (idle, or superseded): it is no one's spare and no install's actor."""
    await store[POOL].delete_one({"_id": name})


async def spares(store: Store, deployment: str, limit: int = 3) -> list[Document]:
    """Waiting spares of the deployment (a few: the caller tries them in turn)."""
    return await store[POOL].find({"deployment": deployment, "state": "spare"}).limit(limit).to_list(limit)


async def counts(store: Store, deployment: str) -> dict[str, int]:
    """Waiting spares per node (the pool keeper tops each node up)."""
    out: dict[str, int] = {}
    async for doc in store[POOL].find({"deployment": deployment, "state": "spare"}, {"node": 1}):
        out[doc["node"]] = out.get(doc["node"], 0) + 1
    return out


async def names(store: Store, deployment: str) -> set[str]:
    """Every pool actor of the deployment, waiting or adopted."""
    return {doc["_id"] async for doc in store[POOL].find({"deployment": deployment}, {"_id": 1})}


async def entry(store: Store, name: str) -> Document | None:
    """A pool actor's record (a restarted spare reads what it was)."""
    return await store[POOL].find_one({"_id": name})
