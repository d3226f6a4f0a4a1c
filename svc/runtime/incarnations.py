"""Which copy of an install's actor may act: the install's incarnation record.

`actor_incarnations` holds one record per install: the incarnation (a fresh id per copy of the
actor) that may write the install's runs (svc/runtime/ledger.py stamps every write with it), the Ray
actor it lives in, when it last beat, and whether it left. A copy's constructor takes the record
over; a spare of the warm pool adopts it only when no live copy holds it; the sweeper reads it to
tell a gone actor (`neglected_runs.orphaned`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pymongo.errors import DuplicateKeyError

from svc.core import Document, Store, utcnow

INCARNATIONS = "actor_incarnations"


async def take_over(
    store: Store, install_id: str, incarnation: str, actor: str | None = None, node: str | None = None
) -> None:
    """Make `incarnation` the copy of the install's actor that may act (its constructor), naming
    the Ray actor it lives in (how a spare that adopted the install is found) and its node (where
    the install runs, for operators and the cluster tests)."""
    await store[INCARNATIONS].update_one(
        {"_id": install_id},
        {
            "$set": {
                "incarnation": incarnation,
                "actor": actor,
                "node": node,
                "since": utcnow(),
                "seenAt": utcnow(),
                "gone": False,
            }
        },
        upsert=True,
    )


async def adopt_install(
    store: Store,
    install_id: str,
    incarnation: str,
    actor: str,
    now: datetime,
    stale: timedelta,
    node: str | None = None,
) -> bool:
    """A spare takes the install over, only if no live copy holds it (none, one that left, or one
    whose beat is `stale`): two spares adopting one install at once give one winner."""
    change = {
        "$set": {
            "incarnation": incarnation,
            "actor": actor,
            "node": node,
            "since": now,
            "seenAt": now,
            "gone": False,
        }
    }
    live = {"$or": [{"gone": True}, {"seenAt": {"$lt": now - stale}}]}
    try:
        done = await store[INCARNATIONS].update_one({"_id": install_id, **live}, change, upsert=True)
    except DuplicateKeyError:  # a live copy holds it (the upsert's insert met its record)
        return False
    return done.matched_count == 1 or done.upserted_id is not None


async def holder(store: Store, install_id: str) -> Document | None:
    """The install's incarnation record (which copy of its actor may act, and where it lives)."""
    return await store[INCARNATIONS].find_one({"_id": install_id})


async def beat(store: Store, install_id: str, incarnation: str) -> bool:
    """Say this incarnation lives; False when a newer one took over (this copy must stop)."""
    done = await store[INCARNATIONS].update_one(
        {"_id": install_id, "incarnation": incarnation}, {"$set": {"seenAt": utcnow()}}
    )
    return done.matched_count == 1


async def leave(store: Store, install_id: str, incarnation: str) -> None:
    """An actor exiting cleanly says so, so the sweeper need not wait for its beat to age."""
    await store[INCARNATIONS].update_one(
        {"_id": install_id, "incarnation": incarnation}, {"$set": {"gone": True, "seenAt": utcnow()}}
    )
