"""Merging install secrets under the per-install cap, as one conditional write.

The cap counts the names the install holds after the merge. Counting and writing
are one step: the write's filter computes, on the server, the size of the union of
the names held and the names given (`$expr`), so any number of merges at once each
either fit and land or are refused; none has to retry (an optimistic revision check
made ten merges at once fail with 409 although every one was valid).
"""

from __future__ import annotations

from typing import Any

from svc.core import BadRequest, Document, NotFound, Store, utcnow
from svc.installs.fields import MAX_INSTALL_SECRETS

HELD_NAMES = {"$map": {"input": {"$objectToArray": {"$ifNull": ["$secretsEncrypted", {}]}}, "in": "$$this.k"}}


def fits(names: list[str]) -> Document:
    """A filter clause: the install holds at most MAX_INSTALL_SECRETS names once `names` are added."""
    return {
        "$expr": {"$lte": [{"$size": {"$setUnion": [HELD_NAMES, {"$literal": names}]}}, MAX_INSTALL_SECRETS]}
    }


async def merge_capped_secrets(store: Store, doc: Document, encrypted: dict[str, Any]) -> None:
    """Set `secretsEncrypted.<name>` for each given name; 400 when the install would exceed the cap."""
    names = sorted({key.split(".", 1)[1] for key in encrypted})
    result = await store.installs.update_one(
        {"_id": doc["_id"], **fits(names)},
        {"$set": {**encrypted, "updatedAt": utcnow()}},
    )
    if result.matched_count:
        return
    fresh = await store.installs.find_one({"_id": doc["_id"]}, {"secretsEncrypted": 1})
    if fresh is None:
        raise NotFound("Install not found")
    held = set(fresh.get("secretsEncrypted") or {})
    raise BadRequest(
        f"secrets: an install holds at most {MAX_INSTALL_SECRETS} names "
        f"(it holds {len(held)}; this would make {len(held | set(names))})"
    )
