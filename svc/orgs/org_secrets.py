"""The org secret vault: UPPER_SNAKE_CASE names, values encrypted and never returned, every change
audited (without the value). Org secrets reach the org's managed runs (an install secret of the
same name wins)."""

from __future__ import annotations

import re
from typing import Any

from pymongo import ASCENDING
from pymongo.errors import DuplicateKeyError

from svc.core import BadRequest, Conflict, Encrypted, NotFound, Slots, Store, Vault, iso, new_id, utcnow
from svc.orgs.access import MAX_LISTED, OrgAccess
from svc.orgs.bodies import SecretBody
from svc.orgs.org_audit_log import AuditLog

# The Fernet fields this package stores (`svc keys rotate` re-encrypts them).
ENCRYPTED = (Encrypted("org_secrets", "valueEncrypted"),)


def secret_key(raw: str) -> str:
    """UPPER_SNAKE_CASE (`openai api-key` → `OPENAI_API_KEY`); 400 when nothing usable is left."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", raw.strip())
    key = re.sub(r"[^A-Za-z0-9]+", "_", spaced).strip("_").upper()
    if not key:
        raise BadRequest("key: must contain letters or digits")
    if key[0].isdigit():
        raise BadRequest("key: must start with a letter")
    return key[:128]


class OrgSecrets:
    """The `org_secrets` collection."""

    def __init__(self, store: Store, org_access: OrgAccess, audit: AuditLog, vault: Vault) -> None:
        self.store = store
        self.org_access = org_access
        self.audit = audit
        self.vault = vault
        # The 500-secret cap is a claim on a per-org counter, not a count before the insert.
        self.slots = Slots(store["org_secret_slots"])

    async def secrets(self, user_id: str, slug: str) -> list[dict[str, Any]]:
        """Secret names and dates (never values), by key."""
        access = await self.org_access.check(user_id, slug, "secrets.list")
        docs = (
            await self.store["org_secrets"]
            .find({"orgId": access.org["_id"]}, {"valueEncrypted": 0})
            .sort("key", ASCENDING)
            .to_list(MAX_LISTED)
        )
        return [
            {
                "id": d["_id"],
                "key": d["key"],
                "createdAt": iso(d.get("createdAt")),
                "updatedAt": iso(d.get("updatedAt")),
            }
            for d in docs
        ]

    async def set_secret(self, user_id: str, slug: str, body: SecretBody) -> str:
        """Create or replace a secret (encrypted); audited as created or updated, never with the value."""
        access = await self.org_access.check(user_id, slug, "secrets.set")
        key = secret_key(body.key)
        org_id = access.org["_id"]
        now = utcnow()
        collection = self.store["org_secrets"]
        existing = await collection.count_documents({"orgId": org_id, "key": key}) > 0
        claimed = not existing and await self._claim(org_id)
        for _ in range(2):
            try:
                result = await collection.update_one(
                    {"orgId": org_id, "key": key},
                    {
                        "$set": {"valueEncrypted": self.vault.encrypt(body.value), "updatedAt": now},
                        "$setOnInsert": {"_id": new_id(), "createdAt": now},
                    },
                    upsert=True,
                )
                break
            except DuplicateKeyError:
                continue
        else:
            if claimed:
                await self.slots.release(org_id)
            raise Conflict("Concurrent update; try again")
        created = result.upserted_id is not None
        if claimed and not created:
            await self.slots.release(org_id)  # a racing request created it first
        elif created and not claimed:
            # Deleted between the check and the write, so this made a new one: it needs a slot.
            try:
                await self._claim(org_id)
            except Conflict:
                await collection.delete_one({"_id": result.upserted_id})
                raise
        action = "secret.created" if created else "secret.updated"
        await self.audit.record(org_id, action, access.actor, {"key": key})
        return key

    async def _claim(self, org_id: str) -> bool:
        """Take one of the org's secret slots; 409 when all are taken."""
        collection = self.store["org_secrets"]
        existing = lambda: collection.count_documents({"orgId": org_id})  # noqa: E731
        if not await self.slots.claim(org_id, MAX_LISTED, existing):
            raise Conflict(f"Secret limit reached ({MAX_LISTED}); delete one first")
        return True

    async def delete_secret(self, user_id: str, slug: str, raw_key: str) -> None:
        """Remove a secret; 404 when there is none of that name."""
        access = await self.org_access.check(user_id, slug, "secrets.delete")
        key = secret_key(raw_key)
        deleted = await self.store["org_secrets"].delete_one({"orgId": access.org["_id"], "key": key})
        if not deleted.deleted_count:
            raise NotFound("Secret not found")
        await self.slots.release(access.org["_id"])
        await self.audit.record(access.org["_id"], "secret.deleted", access.actor, {"key": key})

    async def delete_all(self, org_id: str) -> None:
        """Delete every secret of an org being deleted."""
        await self.store["org_secrets"].delete_many({"orgId": org_id})
        await self.slots.forget(org_id)
