"""Reading published versions for installs moving between them (docs/upgrades.md).

The templates package owns `templates` and `template_versions`; installs ask these functions
rather than reading the collections themselves.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pymongo import ASCENDING, DESCENDING

from svc.core import Document, Store, iso

MAX_LOG = 100
HEAD_FIELDS = {
    "kind": 1,
    "name": 1,
    "slug": 1,
    "status": 1,
    "version": 1,
    "semver": 1,
    "definition": 1,
    "pricingModel": 1,
    "priceUsdCents": 1,
    "priceHistory": 1,
}


async def template_head(store: Store, template_id: str) -> Document | None:
    """The template as it is now (its newest published version, status and price)."""
    return await store["templates"].find_one({"_id": template_id, "kind": "template"}, HEAD_FIELDS)


async def template_heads(store: Store, template_ids: list[str]) -> dict[str, Document]:
    """Several templates as they are now, by id (the deployer's home list)."""
    cursor = store["templates"].find({"_id": {"$in": template_ids}, "kind": "template"}, HEAD_FIELDS)
    return {doc["_id"]: doc for doc in await cursor.to_list(None)}


async def published_version(store: Store, template_id: str, version: int) -> Document | None:
    """One published version's snapshot (definition, semver, bump, change log, price), or None."""
    return await store["template_versions"].find_one({"templateId": template_id, "version": version})


async def version_log(store: Store, template_id: str, after: int, upto: int) -> list[dict[str, Any]]:
    """The published versions in (after, upto], newest first: what a move over them brings."""
    low, high = sorted((after, upto))
    docs = (
        await store["template_versions"]
        .find({"templateId": template_id, "version": {"$gt": low, "$lte": high}}, {"definition": 0})
        .sort("version", DESCENDING)
        .to_list(MAX_LOG)
    )
    return [
        {
            "version": doc["version"],
            "semver": doc.get("semver"),
            "bump": doc.get("bump"),
            "changeLog": doc.get("changeLog"),
            "publishedAt": iso(doc.get("publishedAt")),
        }
        for doc in docs
    ]


async def releases_after(
    store: Store, after: tuple[datetime, str] | None, limit: int
) -> list[Document]:
    """Versions published after a point (publishedAt, _id), oldest first, without definitions."""
    query: Document = {"version": {"$gt": 1}}
    if after is not None:
        stamp, snapshot_id = after
        query["$or"] = [{"publishedAt": {"$gt": stamp}}, {"publishedAt": stamp, "_id": {"$gt": snapshot_id}}]
    return (
        await store["template_versions"]
        .find(query, {"definition": 0})
        .sort([("publishedAt", ASCENDING), ("_id", ASCENDING)])
        .to_list(limit)
    )
