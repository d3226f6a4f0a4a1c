"""Reading templates: the published list (and its search), one template, its versions, and the
semver of an installed version number. The reading half of `Templates` (a mixin on its store)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from pymongo import DESCENDING
from pymongo.asynchronous.collection import AsyncCollection

from svc.core import Document, NotFound, Store, iso
from svc.identity import Principal
from svc.templates.resources import (
    LIST_DEFAULT,
    decode_cursor,
    encode_cursor,
    is_listed,
    is_owner,
    owned_by,
    view,
)

MINE_LISTED = 200


class TemplateReading:
    """What anyone may read of templates, each answer limited to what the caller may see."""

    store: Store

    @property
    def _templates(self) -> AsyncCollection[Document]:
        return self.store["templates"]

    @property
    def _versions(self) -> AsyncCollection[Document]:
        return self.store["template_versions"]

    async def list_published(
        self,
        principal: Principal | None,
        limit: int = LIST_DEFAULT,
        cursor: str | None = None,
        search: str | None = None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Published public templates (and the caller's own published team ones), newest first;
        with `search`, those whose name, slug or description contains it (any case)."""
        visible: list[Document] = [{"visibility": "public"}]
        if principal is not None:
            visible.append(owned_by(principal))
        query: Document = {"kind": "template", "status": "published", "$or": visible}
        if search:
            text = {"$regex": re.escape(search), "$options": "i"}
            query = {"$and": [query, {"$or": [{"name": text}, {"slug": text}, {"description": text}]}]}
        if cursor:
            stamp, doc_id = decode_cursor(cursor)
            query = {
                "$and": [
                    query,
                    {
                        "$or": [
                            {"publishedAt": {"$lt": stamp}},
                            {"publishedAt": stamp, "_id": {"$lt": doc_id}},
                        ]
                    },
                ]
            }
        docs = (
            await self._templates.find(query)
            .sort([("publishedAt", DESCENDING), ("_id", DESCENDING)])
            .limit(limit + 1)
            .to_list(limit + 1)
        )
        next_cursor = encode_cursor(docs[limit - 1]) if len(docs) > limit else None
        return [view(doc) for doc in docs[:limit]], next_cursor

    async def get(self, principal: Principal | None, template_id: str) -> dict[str, Any]:
        """One template the caller may see (its owner, or anyone for a listed one)."""
        return (await self.viewed(principal, template_id))[0]

    async def viewed(self, principal: Principal | None, template_id: str) -> tuple[dict[str, Any], bool]:
        """`get`'s answer and whether the caller owns the template (who is shown its actions)."""
        doc = await self._visible(principal, template_id)
        return view(doc), is_owner(principal, doc)

    async def mine(self, principal: Principal, limit: int = MINE_LISTED) -> list[dict[str, Any]]:
        """The caller's own templates in every state (drafts, version drafts, published, archived),
        last changed first, without their definitions: the builder's list."""
        docs = (
            await self._templates.find(owned_by(principal), {"definition": 0})
            .sort([("updatedAt", DESCENDING)])
            .to_list(limit)
        )
        return [
            {
                "id": doc["_id"],
                "kind": doc.get("kind"),
                "status": doc["status"],
                "name": doc["name"],
                "slug": doc["slug"],
                "semver": doc.get("semver"),
                "visibility": doc.get("visibility"),
                "updatedAt": iso(doc.get("updatedAt")),
            }
            for doc in docs
        ]

    async def versions(self, principal: Principal | None, template_id: str) -> list[dict[str, Any]]:
        """Every published version, newest first, with its bump and change log."""
        doc = await self._visible(principal, template_id)
        snapshots = (
            await self._versions.find({"templateId": doc["_id"]}).sort("version", DESCENDING).to_list(None)
        )
        return [
            {
                "version": snap["version"],
                "semver": snap["semver"],
                "bump": snap["bump"],
                "changeLog": snap.get("changeLog"),
                "publishedAt": iso(snap["publishedAt"]),
                "scorecard": snap.get("evalScorecard"),
            }
            for snap in snapshots
        ]

    async def semvers(self, versions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], str]:
        """The semver of each (template id, version number): an install records the number, while
        people read versions as semver. One read by the snapshots' ids, however many are asked."""
        ids = list(dict.fromkeys(f"{template_id}:{number}" for template_id, number in versions))
        if not ids:
            return {}
        found = await self._versions.find(
            {"_id": {"$in": ids}}, {"templateId": 1, "version": 1, "semver": 1}
        ).to_list(len(ids))
        return {(snap["templateId"], snap["version"]): snap["semver"] for snap in found}

    async def _visible(self, principal: Principal | None, template_id: str) -> Document:
        doc = await self._templates.find_one({"_id": template_id})
        if doc is None or not (is_owner(principal, doc) or is_listed(doc)):
            raise NotFound("Template not found")
        return doc
