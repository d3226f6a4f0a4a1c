"""What other packages read of templates: the templates package owns `templates` and
`template_versions`; everyone else asks these functions (tests/test_architecture.py, ownership)."""

from __future__ import annotations

from collections.abc import Iterable

from pymongo import DESCENDING

from svc.core import Document, Store, projection


async def find_template(
    store: Store, template_id: str | None, *fields: str, kind: str | None = None
) -> Document | None:
    """One template (or draft) by id, only `fields` when named; with `kind`, only of that kind."""
    query: Document = {"_id": template_id} if kind is None else {"_id": template_id, "kind": kind}
    return await store["templates"].find_one(query, projection(fields))


async def find_templates(store: Store, template_ids: Iterable[str], *fields: str) -> dict[str, Document]:
    """Templates by id (only `fields` when named); the unknown ids are absent."""
    query = {"_id": {"$in": list(template_ids)}}
    return {doc["_id"]: doc async for doc in store["templates"].find(query, projection(fields))}


async def template_by_id_or_slug(
    store: Store, template_id: str | None, slug: str | None, projection: Document | None = None
) -> Document | None:
    """A template (kind `template`) by id and/or slug, with one index-covered look-up.

    By `_id` alone, or by `slug` alone (its unique index is partial on `kind: template`);
    the other conditions are checked here. `{kind, _id}` in one filter has no index that
    covers it, and the embedded server then reads every template.
    """
    if template_id is not None:
        doc = await store["templates"].find_one({"_id": template_id}, projection)
    else:
        doc = await store["templates"].find_one({"kind": "template", "slug": slug}, projection)
    if doc is None or doc.get("kind") != "template" or (slug is not None and doc.get("slug") != slug):
        return None
    return doc


async def paid_templates(store: Store, paid_models: Iterable[str]) -> dict[str, Document]:
    """Templates paid now, or paid earlier in a period not billed yet (a change to free waits),
    by id, with their pricing and owner (the monthly cycle's list)."""
    models = list(paid_models)
    query = {
        "kind": "template",
        "$or": [{"pricingModel": {"$in": models}}, {"priceHistory.pricingModel": {"$in": models}}],
    }
    fields = {"pricingModel": 1, "priceUsdCents": 1, "priceHistory": 1, "owner": 1}
    return {doc["_id"]: doc async for doc in store["templates"].find(query, fields)}


async def org_templates(store: Store, org_id: str, limit: int) -> list[Document]:
    """The org's newest templates (kind `template`), newest first."""
    query = {"owner.kind": "org", "owner.id": org_id, "kind": "template"}
    cursor = store["templates"].find(query).sort([("createdAt", DESCENDING), ("_id", DESCENDING)])
    return await cursor.to_list(limit)
