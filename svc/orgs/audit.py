"""The org audit log: append-only records of who changed what in an organisation.

Only `record` writes, and it only inserts: no code path updates or deletes an
audit event (an org's events outlive the org). Meta never carries a secret value.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pymongo import DESCENDING

from svc.core import Document, Store, Timeline, Timestamp, actor_of, iso, tokens, utcnow

COLLECTION = "org_audit"
MAX_PAGE = 10_000


@dataclass(frozen=True)
class Actor:
    """Who did it: a user, or the system (id and email None) for provider and operator changes."""

    id: str | None
    email: str | None


SYSTEM = Actor(None, None)


class AuditQuery(BaseModel):
    """Query of GET /api/orgs/:slug/audit-log."""

    model_config = ConfigDict(populate_by_name=True)

    page: int = Field(default=1, ge=1, le=MAX_PAGE)
    limit: int = Field(default=50, ge=1, le=100)
    from_: Timestamp | None = Field(default=None, alias="from", description="ISO 8601, inclusive")
    to: Timestamp | None = Field(default=None, description="ISO 8601, inclusive")


class AuditLog:
    """Writes and pages audit events."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def record(
        self, org_id: str, action: str, actor: Actor, meta: dict[str, Any] | None = None
    ) -> None:
        """Append one event."""
        await self.store[COLLECTION].insert_one(
            {
                "_id": tokens.new_id(),
                "orgId": org_id,
                "actorId": actor.id,
                "actorEmail": actor.email,
                "action": action,
                "meta": meta or {},
                "createdAt": utcnow(),
            }
        )
        await Timeline(self.store).record(
            "org",
            action,
            org_id=org_id,
            actor=actor_of(actor.id),
            meta={**(meta or {}), "actorEmail": actor.email},
        )

    async def page(
        self, org_id: str, page: int, limit: int, start: datetime | None, end: datetime | None
    ) -> list[dict[str, Any]]:
        """One page of the org's events, newest first."""
        query: Document = {"orgId": org_id}
        window: Document = {}
        if start is not None:
            window["$gte"] = start
        if end is not None:
            window["$lte"] = end
        if window:
            query["createdAt"] = window
        cursor = (
            self.store[COLLECTION]
            .find(query)
            .sort([("createdAt", DESCENDING), ("_id", DESCENDING)])
            .skip((page - 1) * limit)
            .limit(limit)
        )
        return [view(doc) for doc in await cursor.to_list(limit)]


def view(doc: Document) -> dict[str, Any]:
    """The spec's Audit event."""
    return {
        "id": doc["_id"],
        "actorId": doc.get("actorId"),
        "actorEmail": doc.get("actorEmail"),
        "action": doc["action"],
        "meta": doc.get("meta") or {},
        "createdAt": iso(doc["createdAt"]),
    }
