"""What other packages read of orgs: the orgs package owns `orgs`, `org_members` and
`org_secrets`; everyone else asks these functions (tests/test_architecture.py, ownership).
A package below orgs gets them handed in by the composition root (svc/wiring.py)."""

from __future__ import annotations

from collections.abc import Iterable

from svc.core import Document, Store, Vault

LIVE: Document = {"deleting": {"$ne": True}}


async def membership(store: Store, org_id: str, user_id: str) -> Document | None:
    """The user's membership of the org (its role), or None."""
    return await store.org_members.find_one({"orgId": org_id, "userId": user_id})


async def is_member(store: Store, org_id: str, user_id: str) -> bool:
    """Whether the user belongs to the org now: the one answer to the question."""
    return await store.org_members.find_one({"orgId": org_id, "userId": user_id}, {"_id": 1}) is not None


async def owns_an_org(store: Store, user_id: str) -> bool:
    """Whether the user is the owner of any org."""
    return bool(await store.org_members.count_documents({"userId": user_id, "role": "owner"}, limit=1))


async def member_orgs(store: Store, user_id: str) -> dict[str, Document | None]:
    """The orgs the user belongs to, by id, in the order of the memberships (None: an org whose
    record is gone while the membership is not)."""
    memberships = await store.org_members.find({"userId": user_id}).to_list(None)
    org_ids = [m["orgId"] for m in memberships]
    orgs = {o["_id"]: o for o in await store.orgs.find({"_id": {"$in": org_ids}}).to_list(None)}
    return {org_id: orgs.get(org_id) for org_id in org_ids}


async def key_org(store: Store, user_id: str | None, org_id: str | None) -> Document | None:
    """The org a key speaks for: a personal key's user's first org (by joining), else the org's."""
    if user_id is not None:
        first = await store.org_members.find_one({"userId": user_id}, sort=[("joinedAt", 1)])
        org_id = first["orgId"] if first else None
    return await store.orgs.find_one({"_id": org_id}) if org_id else None


async def find_org(store: Store, org_id: str, *fields: str) -> Document | None:
    """One org by id (only `fields` when named), or None."""
    return await store.orgs.find_one({"_id": org_id}, {name: 1 for name in fields} or None)


async def org_id_where(store: Store, field: str, value: str) -> str | None:
    """The id of the org whose `field` is `value` (a provider's customer or subscription id)."""
    org = await store.orgs.find_one({field: value}, {"_id": 1})
    return str(org["_id"]) if org is not None else None


async def is_live(store: Store, org_id: str) -> bool:
    """Whether the org exists and is not being deleted."""
    return bool(await store.orgs.count_documents({"_id": org_id, **LIVE}, limit=1))


async def secret_names(store: Store, org_ids: Iterable[str], limit: int | None = None) -> dict[str, set[str]]:
    """The names (never the values) of each org's secrets, by org id."""
    ids = list(org_ids)
    if not ids:
        return {}
    names: dict[str, set[str]] = {}
    cursor = store["org_secrets"].find({"orgId": {"$in": ids}}, {"orgId": 1, "key": 1})
    for doc in await cursor.to_list(limit):
        names.setdefault(doc["orgId"], set()).add(doc["key"])
    return names


async def secret_values(store: Store, vault: Vault, org_id: str) -> dict[str, str]:
    """The org's secrets, decrypted, by name (for a run of one of its installs)."""
    values: dict[str, str] = {}
    async for doc in store["org_secrets"].find({"orgId": org_id}):
        values[doc["key"]] = vault.decrypt(doc["valueEncrypted"])
    return values


class OrgReads:
    """The orgs' answers for the packages below them (svc.core.OrgLookups), over one store."""

    def __init__(self, store: Store, vault: Vault | None = None) -> None:
        self.store = store
        self.vault = vault

    async def is_member(self, org_id: str, user_id: str) -> bool:
        return await is_member(self.store, org_id, user_id)

    async def member_orgs(self, user_id: str) -> dict[str, Document | None]:
        return await member_orgs(self.store, user_id)

    async def is_live(self, org_id: str) -> bool:
        return await is_live(self.store, org_id)

    async def owns_an_org(self, user_id: str) -> bool:
        return await owns_an_org(self.store, user_id)

    async def key_org(self, user_id: str | None, org_id: str | None) -> Document | None:
        return await key_org(self.store, user_id, org_id)

    async def secret_names(self, org_ids: list[str], limit: int | None = None) -> dict[str, set[str]]:
        return await secret_names(self.store, org_ids, limit)

    async def secret_values(self, org_id: str) -> dict[str, str]:
        if self.vault is None:
            raise RuntimeError("OrgReads was built without the vault: it cannot decrypt org secrets")
        return await secret_values(self.store, self.vault, org_id)
