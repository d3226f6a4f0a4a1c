"""Archiving every published template of a deleted account."""

from __future__ import annotations

from svc.core import Store, utcnow


async def archive_user_templates(store: Store, user_id: str) -> int:
    """Archive the user's published personal templates: delisted and closed to new installs,
    while the installs other people made from them keep running (the lifecycle's archive)."""
    now = utcnow()
    result = await store["templates"].update_many(
        {"owner.kind": "user", "owner.id": user_id, "kind": "template", "status": "published"},
        {"$set": {"status": "archived", "archivedAt": now, "updatedAt": now}},
    )
    return result.modified_count
