"""Personal and org API keys (the org package decides who may manage org keys).

The spec shows a user's full key values in the key list, so personal keys are
stored encrypted (Fernet) for display, beside a SHA-256 hash that is the unique
index used to authenticate. Org keys (shown once) are stored by hash only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import Field
from pymongo import DESCENDING

from svc.core import (
    Conflict,
    Document,
    Encrypted,
    Forbidden,
    NotFound,
    RequestBody,
    Slots,
    Store,
    Timeline,
    TTLCache,
    Vault,
    actor_of,
    credential_digest,
    iso,
    new_api_key,
    new_id,
    utcnow,
)

MAX_KEYS_PER_USER = 100
CREATION_NOTE = "Store this key somewhere safe: it acts as you for every API call made with it."

# The Fernet fields this package stores (`svc keys rotate` re-encrypts them).
ENCRYPTED = (Encrypted("api_keys", "keyEncrypted"),)


class CreateKeyBody(RequestBody):
    """POST /api/auth/keys."""

    label: str | None = Field(default=None, max_length=100)
    installId: str | None = Field(default=None, min_length=1, max_length=64)


class ApiKeys:
    """List, create and revoke keys: a user's personal keys, and the storage of org keys."""

    def __init__(
        self,
        store: Store,
        vault: Vault,
        key_cache: TTLCache[str, Any],
        may_scope: Callable[[str, str], Awaitable[bool]],
    ) -> None:
        self.store = store
        self.vault = vault
        # Resolved keys by hash (shared with svc.credentials); a revoked key is dropped from it.
        self.key_cache = key_cache
        # Whether a user may scope a key to an install: the installs package's one reach rule
        # (the install's deployer), handed in so identity needs no import of installs.
        self.may_scope = may_scope

    async def list_for_user(self, user_id: str) -> list[dict[str, Any]]:
        """Newest first, with the full key values (bounded by MAX_KEYS_PER_USER)."""
        cursor = self.store.api_keys.find({"userId": user_id}).sort("createdAt", DESCENDING)
        return [self._view(doc) for doc in await cursor.to_list(MAX_KEYS_PER_USER)]

    async def create_for_user(self, user_id: str, body: CreateKeyBody) -> dict[str, Any]:
        """A new `svc_live_` key, optionally scoped to one of the user's installs."""
        if body.installId is not None:
            if not await self.may_scope(user_id, body.installId):
                raise NotFound("Install not found")
        # The cap is a counter on the user, taken atomically, so concurrent creations cannot pass it.
        claimed = await self.store.users.find_one_and_update(
            {"_id": user_id, "keyCount": {"$lt": MAX_KEYS_PER_USER}}, {"$inc": {"keyCount": 1}}, {"_id": 1}
        )
        if claimed is None:
            raise Conflict(f"Key limit reached ({MAX_KEYS_PER_USER} keys); delete one first")
        raw = new_api_key()
        doc = {
            "_id": new_id(),
            "keyHash": credential_digest(raw),
            "keyEncrypted": self.vault.encrypt(raw),
            "userId": user_id,
            "orgId": None,
            "label": body.label,
            "installId": body.installId,
            "createdAt": utcnow(),
        }
        try:
            await self.store.api_keys.insert_one(doc)
        except BaseException:
            await self.store.users.update_one({"_id": user_id}, {"$inc": {"keyCount": -1}})
            raise
        if body.installId is not None:
            await Timeline(self.store).record(
                "key",
                "key.created",
                install_id=body.installId,
                actor=actor_of(user_id, "session"),
                meta={"keyId": doc["_id"], "label": body.label},
            )
        view = self._view(doc, raw)
        view["installId"] = body.installId
        view["note"] = CREATION_NOTE
        return view

    async def delete_for_user(self, user_id: str, key_id: str) -> None:
        """Revoke at once; 404 `Key not found`, 403 `Forbidden` for someone else's key."""
        doc = await self.store.api_keys.find_one({"_id": key_id}, {"userId": 1, "keyHash": 1, "installId": 1})
        if doc is None:
            raise NotFound("Key not found")
        if doc.get("userId") != user_id:
            raise Forbidden("Forbidden")
        self.key_cache.revoke(doc["keyHash"])
        deleted = await self.store.api_keys.delete_one({"_id": key_id, "userId": user_id})
        if deleted.deleted_count:
            await self.store.users.update_one({"_id": user_id}, {"$inc": {"keyCount": -1}})
            if doc.get("installId"):
                await Timeline(self.store).record(
                    "key",
                    "key.revoked",
                    install_id=doc["installId"],
                    actor=actor_of(user_id, "session"),
                    meta={"keyId": key_id},
                )

    async def list_for_org(self, org_id: str, limit: int) -> list[dict[str, Any]]:
        """An org's keys, newest first, without their values."""
        docs = await self.store.api_keys.find({"orgId": org_id}).sort("createdAt", DESCENDING).to_list(limit)
        return [{"id": d["_id"], "label": d.get("label"), "createdAt": iso(d["createdAt"])} for d in docs]

    async def create_for_org(
        self, org_id: str, label: str | None, created_by: str, cap: int
    ) -> dict[str, Any]:
        """A new org key (stored by hash only; the raw value is in this answer only)."""
        # The cap and the insert are one claim on the org's counter (racing creates cannot both pass).
        slots = Slots(self.store["org_key_slots"])
        if not await slots.claim(org_id, cap, lambda: self.store.api_keys.count_documents({"orgId": org_id})):
            raise Conflict(f"Key limit reached ({cap} keys); revoke one first")
        raw = new_api_key()
        doc: Document = {
            "_id": new_id(),
            "keyHash": credential_digest(raw),
            "userId": None,
            "orgId": org_id,
            "label": label,
            "installId": None,
            "createdBy": created_by,
            "createdAt": utcnow(),
        }
        try:
            await self.store.api_keys.insert_one(doc)
        except BaseException:
            await slots.release(org_id)
            raise
        return {"id": doc["_id"], "key": raw, "label": label, "createdAt": iso(doc["createdAt"])}

    async def revoke_org_keys(self, org_id: str, key_id: str | None = None) -> int:
        """Revoke an org's keys (one, or all) at once: database, then the key cache; how many."""
        query: Document = {"orgId": org_id, **({"_id": key_id} if key_id is not None else {})}
        docs = await self.store.api_keys.find(query, {"keyHash": 1}).to_list(None)
        for doc in docs:
            self.key_cache.revoke(doc["keyHash"])
        deleted = await self.store.api_keys.delete_many({"_id": {"$in": [d["_id"] for d in docs]}})
        await Slots(self.store["org_key_slots"]).release(org_id, deleted.deleted_count)
        return len(docs)

    def _view(self, doc: Document, raw: str | None = None) -> dict[str, Any]:
        return {
            "id": doc["_id"],
            "key": raw if raw is not None else self.vault.decrypt(doc["keyEncrypted"]),
            "label": doc.get("label"),
            "installId": doc.get("installId"),
            "createdAt": iso(doc["createdAt"]),
        }
