"""The operator's review of the outreach pipelines' drafts and targets: the gate queues, editing,
approving, rejecting and recalling drafts, and the bodies of the console's gate routes. The
pipeline steps that produce the drafts and targets, and the sender that mails approved drafts,
are in pipelines.py. Every decision is also on the install's audit timeline."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator
from pymongo import DESCENDING, ReturnDocument

from svc.core import (
    BadRequest,
    Conflict,
    Document,
    NotFound,
    RequestBody,
    Store,
    Timeline,
    actor_of,
    iso,
    utcnow,
)
from svc.identity import Principal
from svc.installs import Installs
from svc.runtime.pipeline_events import Events
from svc.runtime.pipelines import MAX_DRAFT_ID, DraftStatus


class DraftEdit(RequestBody):
    """PATCH .../drafts/:draftId."""

    subject: str | None = Field(default=None, max_length=1000)
    body: str | None = Field(default=None, max_length=100_000)


class RejectBody(RequestBody):
    """POST .../drafts/:draftId/reject."""

    note: str | None = Field(default=None, max_length=5000)


class BulkFilter(RequestBody):
    """The filter form of a bulk action."""

    status: DraftStatus


class BulkBody(RequestBody):
    """POST .../drafts/bulk: an action on `ids` or on `filter`, exactly one of the two."""

    action: Literal["approve", "reject", "requeue", "archive"]
    ids: list[Annotated[int, Field(ge=1, le=MAX_DRAFT_ID)]] | None = Field(default=None, max_length=1000)
    filter: BulkFilter | None = None

    @model_validator(mode="after")
    def _one_selector(self) -> BulkBody:
        if (self.ids is None) == (self.filter is None):
            raise ValueError("give exactly one of ids and filter")
        return self


class ContinueBody(RequestBody):
    """POST .../continue. `runId` names the paused run (default: the oldest). A gate at a tool call
    is settled by `decision`: `done` (with `note`, what the agent is told), `resend` or `fail` for
    a request whose outcome is unknown; `approve` (the default) or `reject` for an approval."""

    bypassGates: bool = False
    runId: str | None = Field(default=None, min_length=1, max_length=200)
    decision: Literal["done", "resend", "fail", "approve", "reject"] | None = None
    note: str | None = Field(default=None, max_length=2000)


BULK = {
    "approve": ({"$nin": ["sent", "sending", "archived"]}, {"status": "approved"}),
    "reject": ({"$nin": ["sent", "sending", "archived"]}, {"status": "rejected"}),
    "requeue": ({"$nin": ["sent", "sending"]}, {"status": "pending_approval", "rejectionNote": None}),
    "archive": ({"$ne": "archived"}, {"status": "archived"}),
}


def draft_number(value: str) -> int:
    """A draft's id from a path (drafts have integer ids, 1 to MAX_DRAFT_ID); 404 when it is not
    one. The console's routes and the dashboard's draft actions parse it here."""
    try:
        number = int(value)
    except ValueError:
        raise NotFound("Draft not found") from None
    if not 0 < number <= MAX_DRAFT_ID:
        raise NotFound("Draft not found")
    return number


def draft_view(doc: Document) -> dict[str, Any]:
    """The Outreach draft resource."""
    status = "approved" if doc["status"] == "sending" else doc["status"]
    return {
        "id": doc["_id"],
        "installId": doc["installId"],
        "targetId": doc.get("targetId"),
        "status": status,
        "subject": doc["subject"],
        "body": doc["body"],
        "rejectionNote": doc.get("rejectionNote"),
        "editedAt": iso(doc.get("editedAt")),
        "createdAt": iso(doc["createdAt"]),
    }


def target_view(doc: Document | None) -> dict[str, Any] | None:
    """The Target resource."""
    if doc is None:
        return None
    status = "approved" if doc["status"] == "approved" else "pending"
    return {
        "id": doc["_id"],
        "installId": doc["installId"],
        "githubHandle": doc.get("githubHandle"),
        "email": doc.get("email"),
        "priorityScore": doc.get("priorityScore", 0),
        "status": status,
    }


class Outreach:
    """Drafts, targets and gate queues for the operator console."""

    def __init__(self, store: Store, installs: Installs) -> None:
        self.store = store
        self.installs = installs
        self.events = Events(store)
        self.timeline = Timeline(store)

    async def queue(self, principal: Principal, install_id: str, gate: str) -> dict[str, Any]:
        """The records waiting at a built-in gate ({records, total}); an unknown gate is empty."""
        await self.installs.owned(principal, install_id)
        return await self.queue_of(install_id, gate)

    async def queue_of(self, install_id: str, gate: str) -> dict[str, Any]:
        """`queue`'s answer for an install the caller was found to reach (`Installs.owned`): the
        dashboard's live gate panel, which checks reach once per tab, not once per refresh."""
        if gate == "target-review":
            docs = (
                await self.store["targets"]
                .find({"installId": install_id, "status": "pending"})
                .sort("priorityScore", DESCENDING)
                .to_list(500)
            )
            records = [
                {
                    "id": d["_id"],
                    "githubHandle": d.get("githubHandle"),
                    "email": d.get("email"),
                    "priorityScore": d.get("priorityScore", 0),
                    "status": d["status"],
                    "categoryFit": d.get("categoryFit"),
                    "bio": d.get("bio"),
                }
                for d in docs
            ]
        elif gate == "draft-approval":
            docs = (
                await self.store["drafts"]
                .find({"installId": install_id, "status": "pending_approval"})
                .sort("_id", DESCENDING)
                .to_list(500)
            )
            records = [
                {
                    "id": d["_id"],
                    "status": d["status"],
                    "subject": d["subject"],
                    "body": d["body"],
                    "recipientEmail": d.get("recipientEmail"),
                    "targetHandle": d.get("targetHandle"),
                }
                for d in docs
            ]
        else:
            return {"records": [], "total": 0}
        # The queue shows at most 500 records; `total` counts them all.
        collection, status = (
            ("targets", "pending") if gate == "target-review" else ("drafts", "pending_approval")
        )
        total = await self.store[collection].count_documents({"installId": install_id, "status": status})
        return {"records": records, "total": total}

    async def drafts(self, principal: Principal, install_id: str) -> list[dict[str, Any]]:
        """Drafts (not archived), newest first, each with its target."""
        await self.installs.owned(principal, install_id)
        return await self.drafts_of(install_id)

    async def drafts_of(self, install_id: str, *, recipients: bool = False) -> list[dict[str, Any]]:
        """`drafts`' answer for an install the caller was found to reach (`Installs.owned`).
        `recipients`: each item also has the draft's `recipientEmail`, which the draft resource
        leaves out and the dashboard's queue shows (GET /api/installs/:id/drafts has none)."""
        docs = (
            await self.store["drafts"]
            .find({"installId": install_id, "status": {"$ne": "archived"}})
            .sort("_id", DESCENDING)
            .to_list(500)
        )
        target_ids = [d["targetId"] for d in docs if d.get("targetId")]
        targets = {
            t["_id"]: t for t in await self.store["targets"].find({"_id": {"$in": target_ids}}).to_list(None)
        }
        items = [
            {"draft": draft_view(d), "target": target_view(targets.get(d.get("targetId")))} for d in docs
        ]
        if recipients:
            for item, doc in zip(items, docs, strict=True):
                item["recipientEmail"] = doc.get("recipientEmail")
        return items

    async def _draft(self, principal: Principal, install_id: str, draft_id: int) -> Document:
        await self.installs.owned(principal, install_id)
        doc = await self.store["drafts"].find_one({"_id": draft_id, "installId": install_id})
        if doc is None:
            raise NotFound("Draft not found")
        return doc

    async def _move(
        self, install_id: str, draft_id: int, frm: str, changes: dict[str, Any], action: str
    ) -> Document:
        moved = await self.store["drafts"].find_one_and_update(
            {"_id": draft_id, "installId": install_id, "status": frm},
            {"$set": changes},
            return_document=ReturnDocument.AFTER,
        )
        if moved is None:
            current = await self.store["drafts"].find_one({"_id": draft_id}, {"status": 1})
            state = (
                "approved" if current and current["status"] == "sending" else (current or {}).get("status")
            )
            raise Conflict(f"Cannot {action} a draft that is {state}")
        return moved

    async def edit(
        self, principal: Principal, install_id: str, draft_id: int, body: DraftEdit
    ) -> dict[str, Any]:
        """Change subject and/or body of an unsent draft; editedAt is stamped."""
        await self._draft(principal, install_id, draft_id)
        changes = {k: v for k, v in body.model_dump(exclude_unset=True).items() if v is not None}
        if not changes:
            raise BadRequest("Give a subject or a body")
        doc = await self.store["drafts"].find_one_and_update(
            {
                "_id": draft_id,
                "installId": install_id,
                "status": {"$in": ["pending_approval", "approved", "rejected"]},
            },
            {"$set": {**changes, "editedAt": utcnow()}},
            return_document=ReturnDocument.AFTER,
        )
        if doc is None:
            raise Conflict("Cannot edit a draft that is sent or archived")
        return draft_view(doc)

    async def approve(
        self, principal: Principal, install_id: str, draft_id: int, actor: dict[str, Any]
    ) -> Document:
        """pending_approval -> approved."""
        await self._draft(principal, install_id, draft_id)
        doc = await self._move(install_id, draft_id, "pending_approval", {"status": "approved"}, "approve")
        await self.events.emit(
            install_id, "gate_approved", gate_name="draft-approval", meta={"draftId": draft_id}, **actor
        )
        await self._decided(principal, install_id, "gate.approve", {"draftId": draft_id})
        return doc

    async def reject(
        self, principal: Principal, install_id: str, draft_id: int, note: str | None, actor: dict[str, Any]
    ) -> None:
        """pending_approval -> rejected; the note goes back to the writing agent on its next run."""
        await self._draft(principal, install_id, draft_id)
        await self._move(
            install_id,
            draft_id,
            "pending_approval",
            {"status": "rejected", "rejectionNote": note, "noteDelivered": False},
            "reject",
        )
        await self.events.emit(
            install_id, "gate_rejected", gate_name="draft-approval", meta={"draftId": draft_id}, **actor
        )
        await self._decided(principal, install_id, "gate.reject", {"draftId": draft_id, "note": note})

    async def recall(self, principal: Principal, install_id: str, draft_id: int) -> None:
        """approved (not yet sent) -> pending_approval; 409 once sent."""
        await self._draft(principal, install_id, draft_id)
        await self._move(install_id, draft_id, "approved", {"status": "pending_approval"}, "recall")
        await self._decided(principal, install_id, "gate.recall", {"draftId": draft_id})

    async def bulk(self, principal: Principal, install_id: str, body: BulkBody) -> int:
        """Apply an action to the drafts chosen by ids or by a status filter; how many changed."""
        await self.installs.owned(principal, install_id)
        allowed, changes = BULK[body.action]
        query: Document = {"installId": install_id}
        if body.ids is not None:
            query["_id"] = {"$in": body.ids}
            query["status"] = allowed
        else:
            assert body.filter is not None
            query["status"] = body.filter.status
            query["$and"] = [{"status": allowed}]
        result = await self.store["drafts"].update_many(query, {"$set": changes})
        meta: Document = {"bulkAction": body.action, "count": result.modified_count, "ids": body.ids}
        if body.filter is not None:
            meta["filter"] = body.filter.model_dump()
        await self._decided(principal, install_id, "gate.bulk", meta)
        return int(result.modified_count)

    async def _decided(
        self, principal: Principal, install_id: str, action: str, meta: dict[str, Any]
    ) -> None:
        """A gate decision, on the install's audit timeline."""
        actor = actor_of(principal.user_id, principal.via)
        await self.timeline.record("gate", action, install_id=install_id, actor=actor, meta=meta)

    async def pending_drafts(self, install_id: str) -> int:
        """Drafts still waiting for a decision."""
        return await self.store["drafts"].count_documents(
            {"installId": install_id, "status": "pending_approval"}
        )
