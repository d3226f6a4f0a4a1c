"""Remembered secrets: an encrypted copy of install secrets per owner, company and name, so a
re-install into the same company (or, without companies, by the same owner) is pre-filled."""

from __future__ import annotations

from typing import Any

from pymongo import UpdateOne

from svc.core import Document, Store, Vault, new_id, owner_filter, utcnow


class RememberedSecrets:
    """The `vault_secrets` collection."""

    def __init__(self, store: Store, vault: Vault) -> None:
        self.store = store
        self.vault = vault

    @staticmethod
    def _scope(owner: Document, company_id: str | None) -> dict[str, Any]:
        """The filter of one owner's and company's names (svc.core.owner_filter: matched whole,
        `owner` used no index, and a write of 500 names read the collection 500 times). An
        upsert still writes `owner` whole."""
        return {**owner_filter(owner), "companyId": company_id or None}

    async def remember(self, owner: Document, company_id: str | None, values: dict[str, str]) -> None:
        """Keep an encrypted copy of each value."""
        scope = self._scope(owner, company_id)
        now = utcnow()
        # One batched write: a write per name took ~90 ms each on the embedded store.
        writes = [
            UpdateOne(
                {**scope, "key": name},
                {
                    "$set": {"valueEncrypted": self.vault.encrypt(value), "updatedAt": now},
                    "$setOnInsert": {"_id": new_id(), "createdAt": now},
                },
                upsert=True,
            )
            for name, value in values.items()
        ]
        if writes:
            await self.store["vault_secrets"].bulk_write(writes, ordered=False)

    async def prefill(
        self, owner: Document, company_id: str | None, definition: dict[str, Any]
    ) -> dict[str, str]:
        """The remembered values of the definition's required secrets."""
        required = list(definition.get("requiredSecrets") or [])
        if not required:
            return {}
        cursor = self.store["vault_secrets"].find(
            {**self._scope(owner, company_id), "key": {"$in": required}}
        )
        return {doc["key"]: self.vault.decrypt(doc["valueEncrypted"]) for doc in await cursor.to_list(None)}

    async def known(self, owner: Document, company_id: str, keys: list[str]) -> list[str]:
        """The subset of `keys` remembered for this company (and this owner)."""
        cursor = self.store["vault_secrets"].find(
            {**self._scope(owner, company_id), "key": {"$in": keys}}, {"key": 1}
        )
        held = {doc["key"] for doc in await cursor.to_list(None)}
        return [key for key in keys if key in held]
