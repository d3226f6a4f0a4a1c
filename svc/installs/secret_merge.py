"""Merging install secrets under the per-install cap, as one conditional write.

The cap counts the names the install holds after the merge. Counting and writing
are one step: the write's filter requires the `secretsRevision` the count was
made from, so two racing merges cannot both pass a count that only one fits;
the loser re-reads and counts again.
"""

from __future__ import annotations

from typing import Any

from svc.core import BadRequest, Conflict, Document, NotFound, Store, utcnow
from svc.installs.fields import MAX_INSTALL_SECRETS

ATTEMPTS = 8


async def merge_capped_secrets(store: Store, doc: Document, encrypted: dict[str, Any]) -> None:
    """Set `secretsEncrypted.<name>` for each given name; 400 when the install would exceed the cap."""
    names = {key.split(".", 1)[1] for key in encrypted}
    for _ in range(ATTEMPTS):
        held = set(doc.get("secretsEncrypted") or {})
        total = len(held | names)
        if total > MAX_INSTALL_SECRETS:
            raise BadRequest(
                f"secrets: an install holds at most {MAX_INSTALL_SECRETS} names "
                f"(it holds {len(held)}; this would make {total})"
            )
        result = await store.installs.update_one(
            {"_id": doc["_id"], "secretsRevision": doc.get("secretsRevision")},
            {"$set": {**encrypted, "updatedAt": utcnow()}, "$inc": {"secretsRevision": 1}},
        )
        if result.matched_count:
            return
        fresh = await store.installs.find_one(
            {"_id": doc["_id"]}, {"secretsEncrypted": 1, "secretsRevision": 1}
        )
        if fresh is None:
            raise NotFound("Install not found")
        doc = fresh
    raise Conflict("The install's secrets are being changed by another request; try again")
