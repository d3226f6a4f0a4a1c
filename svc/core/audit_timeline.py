"""One audit timeline per install and per org: what happened, in order, from every capability.

Gate decisions, egress verdicts that blocked or went to the judge, key, secret and variable
changes, schedule changes, cancellations and billing events are appended here by the package
that decides them (this collection is core's; the others call `Timeline.record`). Org audit
events are appended too (with `orgId`), so an org's timeline joins its own events and those of
its installs. Append-only: nothing updates or deletes an entry. Meta never carries a secret
value (secret changes name the keys only).
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Any, Literal

from bson import ObjectId
from pydantic import BaseModel, ConfigDict, Field
from pymongo import DESCENDING

from svc.core.bulk import Batch
from svc.core.clock import iso, utcnow
from svc.core.errors import BadRequest
from svc.core.models import Timestamp
from svc.core.store import Document, Store

COLLECTION = "timeline"
Kind = Literal[
    "gate", "egress", "key", "secret", "variable", "schedule", "version", "billing", "install", "org"
]
KINDS: tuple[str, ...] = Kind.__args__  # type: ignore[attr-defined]
MAX_LIMIT = 200
MAX_ORG_INSTALLS = 500


class TimelineQuery(BaseModel):
    """Query of the timeline routes: kinds (comma separated), a time window, a cursor, a limit."""

    model_config = ConfigDict(populate_by_name=True)

    kind: str | None = Field(default=None, max_length=200, description="comma-separated kinds")
    from_: Timestamp | None = Field(default=None, alias="from", description="ISO 8601, inclusive")
    to: Timestamp | None = Field(default=None, description="ISO 8601, inclusive")
    cursor: str | None = Field(default=None, max_length=200)
    limit: int = Field(default=50, ge=1, le=MAX_LIMIT)

    def kinds(self) -> list[str]:
        """The kinds asked for; 400 naming an unknown one."""
        if not self.kind:
            return []
        asked = [k.strip() for k in self.kind.split(",") if k.strip()]
        unknown = [k for k in asked if k not in KINDS]
        if unknown:
            raise BadRequest(f"kind: unknown kind {unknown[0]!r} (one of {', '.join(KINDS)})")
        return asked


def actor_of(user_id: str | None, via: str | None = None) -> dict[str, Any]:
    """Who acted, as the timeline stores it (none for the service itself)."""
    return {"actorId": user_id, "via": via}


def entry(
    kind: Kind,
    action: str,
    *,
    install_id: str | None = None,
    org_id: str | None = None,
    actor: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
    entry_id: str | None = None,
) -> Document:
    """One stored entry. Time-ordered ids keep entries of one millisecond in the order they were
    written; a writer that may send the same entry twice (a run's settlement) passes the id it
    chose once (`entry_id`), so the second send stores nothing."""
    return {
        "_id": entry_id or str(ObjectId()),
        "installId": install_id,
        "orgId": org_id,
        "kind": kind,
        "action": action,
        **(actor or actor_of(None)),
        "meta": meta or {},
        "createdAt": utcnow(),
    }


def add_to(batch: Batch, doc: Document) -> None:
    """An entry (built by `entry` with an id chosen once) as an operation of a batch."""
    batch.put(COLLECTION, doc)


class Timeline:
    """Appends and pages timeline entries."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def record(
        self,
        kind: Kind,
        action: str,
        *,
        install_id: str | None = None,
        org_id: str | None = None,
        actor: dict[str, Any] | None = None,
        meta: dict[str, Any] | None = None,
    ) -> None:
        """Append one entry (to an install's timeline, an org's, or both)."""
        await self.store[COLLECTION].insert_one(
            entry(kind, action, install_id=install_id, org_id=org_id, actor=actor, meta=meta)
        )

    async def page(self, scope: Document, query: TimelineQuery) -> tuple[list[dict[str, Any]], str | None]:
        """One page of entries matching `scope`, newest first, and the cursor of the next page."""
        match: Document = dict(scope)
        kinds = query.kinds()
        if kinds:
            match["kind"] = {"$in": kinds}
        window: Document = {}
        if query.from_ is not None:
            window["$gte"] = query.from_
        if query.to is not None:
            window["$lte"] = query.to
        if query.from_ is not None and query.to is not None and query.from_ > query.to:
            raise BadRequest("from: must not be after to")
        conditions: list[Document] = [match]
        if window:
            conditions.append({"createdAt": window})
        if query.cursor:
            stamp, entry_id = decode_cursor(query.cursor)
            conditions.append(
                {"$or": [{"createdAt": {"$lt": stamp}}, {"createdAt": stamp, "_id": {"$lt": entry_id}}]}
            )
        docs = (
            await self.store[COLLECTION]
            .find({"$and": conditions})
            .sort([("createdAt", DESCENDING), ("_id", DESCENDING)])
            .limit(query.limit + 1)
            .to_list(query.limit + 1)
        )
        following = encode_cursor(docs[query.limit - 1]) if len(docs) > query.limit else None
        return [view(doc) for doc in docs[: query.limit]], following


def view(doc: Document) -> dict[str, Any]:
    """One timeline entry as answered."""
    return {
        "id": doc["_id"],
        "kind": doc["kind"],
        "action": doc["action"],
        "installId": doc.get("installId"),
        "orgId": doc.get("orgId"),
        "actorId": doc.get("actorId"),
        "via": doc.get("via"),
        "meta": doc.get("meta") or {},
        "createdAt": iso(doc["createdAt"]),
    }


def encode_cursor(doc: Document) -> str:
    """An opaque position after `doc`."""
    raw = f"{doc['createdAt'].isoformat()}|{doc['_id']}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The position an `encode_cursor` value names; 400 when it is not one."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        stamp, entry_id = raw.split("|", 1)
        return datetime.fromisoformat(stamp), entry_id
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise BadRequest("cursor: not a cursor this service gave") from None
