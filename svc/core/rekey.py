"""Re-encrypting every stored secret under the vault's newest key (`svc keys rotate`).

Each capability package declares the Fernet fields of the collections it owns (`Encrypted`;
`svc/key_rotation.py` gathers them); this module walks them. Why it is shaped this way:

- **Bounded batches**: a collection is read in `_id` order, `batch` documents at a time, with
  only its encrypted fields projected, so memory and each query stay small whatever the data.
- **Resumable**: after each batch the position reached and the running tallies are written to
  `key_rotations`, keyed by a fingerprint of the newest key; a run interrupted anywhere (a
  crash, Ctrl-C, a lost database) is continued by the next run from that position. Nothing is
  ever left undecryptable: a value is replaced only by its re-encryption, in one conditional
  write per document, and the old key still decrypts what has not been reached.
- **Idempotent**: a value the newest key already decrypts is left as it is, so a second run,
  or values written by the API meanwhile, cost a read and no write.
- **Concurrent writers win**: the write's filter names the values read; a document changed in
  between is read again (the change was made with the newest key, or is re-encrypted now).
- **Audited**: the start of a pass and its end are appended to the timeline (kind `key`), with
  the counts and the key's fingerprint, never a value.

A value no configured key decrypts is counted and named (collection, id, field), never
written; the report then says the old keys must stay.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Any

from pymongo import ReturnDocument

from svc.core.audit_timeline import Timeline
from svc.core.clock import iso, utcnow
from svc.core.store import Document, Store
from svc.core.vault import Vault

log = logging.getLogger(__name__)

COLLECTION = "key_rotations"
BATCH = 200
# A document whose values keep changing under the walk is tried this often, then counted.
ATTEMPTS = 3
# How many undecryptable locations a report names (the count is always complete).
NAMED = 20
TALLIES = ("documents", "values", "reencrypted", "current", "undecryptable", "changing")


@dataclass(frozen=True)
class Encrypted:
    """One stored Fernet field: a token, or (`many`) a map of names to tokens; `field` may be a
    dotted path into a sub-document."""

    collection: str
    field: str
    many: bool = False


Progress = Callable[[Document], Awaitable[None] | None]


def fingerprint(key: str) -> str:
    """A short, one-way name of a key (safe in logs, the timeline and the checkpoint)."""
    return hashlib.sha256(key.encode()).hexdigest()[:16]


class Rekeying:
    """One walk over the declared fields, continuing an interrupted one for the same newest key."""

    def __init__(self, store: Store, vault: Vault, fields: Sequence[Encrypted], batch: int = BATCH) -> None:
        self.store = store
        self.vault = vault
        self.fields = sorted(fields, key=lambda f: (f.collection, f.field))
        self.batch = batch
        self.id = fingerprint(vault.keys[0])

    async def run(self, progress: Progress | None = None) -> Document:
        """Re-encrypt what is not under the newest key; the checkpoint document as the report."""
        checkpoint = await self._begin()
        for collection, fields in groupby(self.fields, key=lambda f: f.collection):
            await self._walk(collection, list(fields), checkpoint, progress)
        finished = await self.store[COLLECTION].find_one_and_update(
            {"_id": self.id},
            {"$set": {"finishedAt": utcnow(), "updatedAt": utcnow()}},
            return_document=ReturnDocument.AFTER,
        )
        assert finished is not None
        await Timeline(self.store).record("key", "vault.rotation_finished", meta=summary(finished))
        log.info("stored secrets re-encrypted under key %s: %s", self.id, summary(finished)["totals"])
        return finished

    async def _begin(self) -> Document:
        """The checkpoint to continue, or a fresh pass (none yet, or the last one finished)."""
        existing = await self.store[COLLECTION].find_one({"_id": self.id})
        if existing is not None and existing.get("finishedAt") is None:
            log.info("continuing the re-encryption under key %s", self.id)
            resumed = await self.store[COLLECTION].find_one_and_update(
                {"_id": self.id},
                {"$inc": {"runs": 1}, "$set": {"updatedAt": utcnow()}},
                return_document=ReturnDocument.AFTER,
            )
            assert resumed is not None  # read just above; a pass's checkpoint is never deleted
            return resumed
        now = utcnow()
        fresh: Document = {
            "_id": self.id,
            "key": self.id,
            "keys": len(self.vault.keys),
            "passes": (existing or {}).get("passes", 0) + 1,
            "runs": 1,
            "startedAt": now,
            "updatedAt": now,
            "finishedAt": None,
            "cursors": {},
            "done": [],
            "tallies": {},
            "undecryptableAt": [],
        }
        await self.store[COLLECTION].replace_one({"_id": self.id}, fresh, upsert=True)
        await Timeline(self.store).record(
            "key", "vault.rotation_started", meta={"key": self.id, "keys": len(self.vault.keys)}
        )
        return fresh

    async def _walk(
        self, collection: str, fields: list[Encrypted], checkpoint: Document, progress: Progress | None
    ) -> None:
        if collection in checkpoint["done"]:
            return
        cursor = checkpoint["cursors"].get(collection)
        projection = {field.field: 1 for field in fields}
        while True:
            query: Document = {} if cursor is None else {"_id": {"$gt": cursor}}
            docs = await self.store[collection].find(query, projection).sort("_id", 1).to_list(self.batch)
            tally = dict.fromkeys(TALLIES, 0)
            lost: list[str] = []
            for doc in docs:
                await self._document(collection, fields, doc, tally, lost)
            done = len(docs) < self.batch
            if docs:
                cursor = docs[-1]["_id"]
            update: Document = {
                "$set": {f"cursors.{collection}": cursor, "updatedAt": utcnow()},
                "$inc": {f"tallies.{collection}.{name}": count for name, count in tally.items()},
            }
            if lost:
                update["$push"] = {"undecryptableAt": {"$each": lost, "$slice": NAMED}}
            if done:
                update["$addToSet"] = {"done": collection}
            saved = await self.store[COLLECTION].find_one_and_update(
                {"_id": self.id}, update, return_document=ReturnDocument.AFTER
            )
            if progress is not None:
                reported = progress({"collection": collection, "batch": tally, "checkpoint": saved})
                if reported is not None:
                    await reported
            if done:
                return

    async def _document(
        self, collection: str, fields: list[Encrypted], doc: Document, tally: dict[str, int], lost: list[str]
    ) -> None:
        """Re-encrypt one document's stale values in one write; read it again if it changed."""
        for _ in range(ATTEMPTS):
            current, stale, undecryptable = 0, {}, []
            for path, token in tokens(fields, doc):
                if self.vault.is_current(token):
                    current += 1
                elif self.vault.can_decrypt(token):
                    stale[path] = token
                else:
                    undecryptable.append(path)
            if not stale:
                break
            written = await self.store[collection].update_one(
                {"_id": doc["_id"], **stale},
                {"$set": {path: self.vault.rotate(token) for path, token in stale.items()}},
            )
            if written.matched_count:
                break
            fresh = await self.store[collection].find_one({"_id": doc["_id"]}, {f.field: 1 for f in fields})
            if fresh is None:
                return  # deleted meanwhile: nothing left to re-encrypt
            doc = fresh
        else:
            tally["documents"] += 1
            tally["changing"] += 1
            return
        tally["documents"] += 1
        tally["values"] += current + len(stale) + len(undecryptable)
        tally["current"] += current
        tally["reencrypted"] += len(stale)
        tally["undecryptable"] += len(undecryptable)
        lost += [f"{collection} {doc['_id']} {path}" for path in undecryptable]


def tokens(fields: list[Encrypted], doc: Document) -> list[tuple[str, str]]:
    """(dotted path, token) of every encrypted value the document holds."""
    found = []
    for field in fields:
        value: Any = doc
        for part in field.field.split("."):  # a field inside a sub-document: `parent.field`
            value = value.get(part) if isinstance(value, dict) else None
        if field.many and isinstance(value, dict):
            found += [
                (f"{field.field}.{name}", token) for name, token in value.items() if isinstance(token, str)
            ]
        elif not field.many and isinstance(value, str):
            found.append((field.field, value))
    return found


def summary(checkpoint: Document) -> Document:
    """The report of a pass: totals, per collection, what could not be decrypted, and whether the
    old keys may go (only when every value is under the newest key)."""
    per_collection = checkpoint.get("tallies") or {}
    totals = {name: sum(t.get(name, 0) for t in per_collection.values()) for name in TALLIES}
    return {
        "key": checkpoint["key"],
        "pass": checkpoint.get("passes", 1),
        "runs": checkpoint.get("runs", 1),
        "startedAt": iso(checkpoint["startedAt"]),
        "finished": checkpoint.get("finishedAt") is not None,
        "totals": totals,
        "collections": per_collection,
        "undecryptable": list(checkpoint.get("undecryptableAt") or []),
        "oldKeysCanBeDropped": checkpoint.get("finishedAt") is not None
        and totals["undecryptable"] == 0
        and totals["changing"] == 0,
    }
