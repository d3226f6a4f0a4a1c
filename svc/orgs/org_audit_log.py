"""The org audit log: append-only records of who changed what in an organisation.

Only `record` writes, and it only inserts: no code path updates or deletes an
audit event (an org's events outlive the org). Meta never carries a secret value.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from svc.core import Document, Store, Timeline, Timestamp, actor_of, iso, new_id, newest_in_windows, utcnow

COLLECTION = "org_audit"
MAX_PAGE = 10_000
SLACK = timedelta(minutes=1)  # between the clocks that stamped the org and its first event


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
                "_id": new_id(),
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
        self,
        org_id: str,
        page: int,
        limit: int,
        start: datetime | None,
        end: datetime | None,
        since: datetime | None = None,
    ) -> list[dict[str, Any]]:
        """One page of the org's events, newest first; `since`: no event is older (the org's creation)."""
        # Offset paging needs the newest page * limit events of the window; they are read in
        # time windows (svc/core/windows.py), so the cost grows with the page asked for,
        # not with the org's history.
        wanted = page * limit
        floor = start if start is not None else (since - SLACK if since is not None else None)
        scope = {"orgId": org_id}
        docs = await newest_in_windows(self.store[COLLECTION], scope, wanted, floor=floor, ceiling=end)
        return [view(doc) for doc in docs[(page - 1) * limit : wanted]]


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
