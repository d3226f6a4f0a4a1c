"""What other packages read of installs: the installs package owns `installs`; everyone else
asks these functions (tests/test_architecture.py, ownership). A package below installs gets
the ones it needs handed in by the composition root (svc/wiring.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from datetime import datetime

from svc.core import Document, Store, credential_digest, projection

# An install that counts for its template (mailed about its changes, counted in its installs).
ACTIVE_INSTALL: Document = {"status": {"$ne": "cancelled"}}


async def find_install(
    store: Store, install_id: str, *fields: str, where: Document | None = None
) -> Document | None:
    """One install by id (only `fields` when named), or None; `where` adds conditions."""
    return await store.installs.find_one({"_id": install_id, **(where or {})}, projection(fields))


async def find_installs(store: Store, install_ids: Iterable[str], *fields: str) -> dict[str, Document]:
    """Installs by id (only `fields` when named); the unknown ids are absent."""
    query = {"_id": {"$in": list(install_ids)}}
    return {doc["_id"]: doc for doc in await store.installs.find(query, projection(fields)).to_list(None)}


async def webhook_install_id(store: Store, token: str) -> str | None:
    """The install whose webhook token this is, or None."""
    doc = await store.installs.find_one({"webhookTokenHash": credential_digest(token)}, {"_id": 1})
    return str(doc["_id"]) if doc is not None else None


async def org_install_ids(store: Store, org_id: str, awaiting_approval: bool = False) -> list[str]:
    """The ids of the org's installs (only those waiting for governance approval, when asked)."""
    query: Document = {"owner.kind": "org", "owner.id": org_id}
    if awaiting_approval:
        query["approval"] = "pending"
    return list(await store.installs.distinct("_id", query))


async def template_install_ids(store: Store, template_id: str) -> list[str]:
    """The ids of every install of the template, cancelled ones too."""
    return [
        doc["_id"] for doc in await store.installs.find({"templateId": template_id}, {"_id": 1}).to_list(None)
    ]


async def active_installs_of(
    store: Store, template_id: str, *fields: str, limit: int | None = None
) -> list[Document]:
    """The template's installs not cancelled (only `fields` when named)."""
    query = {"templateId": template_id, **ACTIVE_INSTALL}
    return await store.installs.find(query, projection(fields)).to_list(limit)


async def count_active_installs(store: Store, template_id: str) -> int:
    """How many of the template's installs are not cancelled."""
    return await store.installs.count_documents({"templateId": template_id, **ACTIVE_INSTALL})


async def ready_versions(store: Store, install_ids: Iterable[str]) -> dict[str, int | None]:
    """Install id -> the template version its runs are queued on, for the ready (completed) ones."""
    query = {"_id": {"$in": list(install_ids)}, "status": "completed"}
    docs = await store.installs.find(query, {"_id": 1, "templateVersion": 1}).to_list(None)
    return {doc["_id"]: doc.get("templateVersion") for doc in docs}


async def installs_of_agent(
    store: Store, external_id: str, platforms: list[str], limit: int
) -> list[Document]:
    """Ready installs on these platforms with a deployed agent of this upstream id."""
    query = {"deployedAgents.externalId": external_id, "platform": {"$in": platforms}, "status": "completed"}
    return await store.installs.find(query).to_list(limit)


async def billable_installs(
    store: Store, template_ids: Iterable[str], cancelled_after: datetime, batch: int
) -> AsyncIterator[Document]:
    """Installs of these templates with a saved payment method, ready or cancelled after the
    given time (installs removed with DELETE still owe their last usage), in `_id` order."""
    query = {
        "$or": [{"status": "completed"}, {"status": "cancelled", "cancelledAt": {"$gt": cancelled_after}}],
        "templateId": {"$in": list(template_ids)},
        "payCustomerId": {"$type": "string"},
        "payPaymentMethodId": {"$type": "string"},
    }
    async for install in store.installs.find(query).sort("_id", 1).batch_size(batch):
        yield install


class InstallReads:
    """The installs' answers for the packages below them (svc.core.InstallLookups)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def find(self, install_id: str) -> Document | None:
        return await find_install(self.store, install_id)

    async def webhook_install_id(self, token: str) -> str | None:
        return await webhook_install_id(self.store, token)

    async def template_install_ids(self, template_id: str) -> list[str]:
        return await template_install_ids(self.store, template_id)

    async def count_active(self, template_id: str) -> int:
        return await count_active_installs(self.store, template_id)

    async def active_of(self, template_id: str, *fields: str, limit: int | None = None) -> list[Document]:
        return await active_installs_of(self.store, template_id, *fields, limit=limit)
