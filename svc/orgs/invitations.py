"""Invitations: mailed at once, one pending per email and org, accepted from the mailed link.

Only the token's hash is stored; the link carries the token itself.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pymongo import DESCENDING, ReturnDocument
from pymongo.errors import DuplicateKeyError

from svc.core import (
    Conflict,
    Document,
    Forbidden,
    Gone,
    Mailer,
    NotFound,
    Store,
    aware,
    credential_digest,
    iso,
    new_id,
    new_session_token,
    utcnow,
)
from svc.identity import normalise_email, user_id_by_email
from svc.orgs.access import MAX_LISTED, OrgAccess, check_role
from svc.orgs.bodies import InvitationBody
from svc.orgs.lookups import is_member
from svc.orgs.org_audit_log import AuditLog
from svc.orgs.views import invitation_view, org_view

INVITATION_LIFETIME = timedelta(days=7)
# Expired invitations are kept a while so that accepting one says "expired", not "not found".
INVITATION_PURGE_AFTER = timedelta(days=30)


class Invitations:
    """The `org_invitations` collection."""

    def __init__(
        self, store: Store, org_access: OrgAccess, audit: AuditLog, mailer: Mailer, public_url: str
    ) -> None:
        self.store = store
        self.org_access = org_access
        self.audit = audit
        self.mailer = mailer
        self.public_url = public_url

    async def invite(self, user_id: str, slug: str, body: InvitationBody) -> dict[str, Any]:
        """Invite an email (replacing a pending invitation's token) and mail the link at once."""
        access = await self.org_access.check(user_id, slug, "invitations.create")
        role = check_role(body.role)
        email = normalise_email(body.email)
        org = access.org
        existing_id = await user_id_by_email(self.store, email)
        if existing_id is not None and await is_member(self.store, org["_id"], existing_id):
            raise Conflict("That person is already a member of this org")
        raw = new_session_token()
        now = utcnow()
        expires = now + INVITATION_LIFETIME
        fields = {
            "role": role,
            "tokenHash": credential_digest(raw),
            "invitedBy": user_id,
            "invitedByEmail": access.actor.email,
            "expiresAt": expires,
            "purgeAt": expires + INVITATION_PURGE_AFTER,
            "createdAt": now,
        }
        doc = await self._upsert(
            "org_invitations", {"orgId": org["_id"], "email": email}, fields, return_doc=True
        )
        assert doc is not None
        link = f"{self.public_url}/invitations/{raw}"
        await self.mailer.send(
            email,
            f"You are invited to join {org['name']}",
            f"{access.actor.email} invited you to join the organisation {org['name']} as {role}.\n\n"
            f"Accept the invitation (sign in with this email address first):\n{link}\n\n"
            f"The invitation expires on {iso(expires)}.",
            kind="org_invitation",
        )
        await self.audit.record(org["_id"], "member.invited", access.actor, {"email": email, "role": role})
        return invitation_view(doc)

    async def _upsert(
        self, collection: str, key: Document, fields: Document, *, return_doc: bool = False
    ) -> Document | None:
        """Insert or update by a unique key; the loser of a race retries as an update."""
        for _ in range(2):
            try:
                return await self.store[collection].find_one_and_update(
                    key,
                    {"$set": fields, "$setOnInsert": {"_id": new_id()}},
                    upsert=True,
                    return_document=ReturnDocument.AFTER,
                )
            except DuplicateKeyError:
                continue
        raise Conflict("Concurrent update; try again")

    async def invitations(self, user_id: str, slug: str) -> list[dict[str, Any]]:
        """Pending invitations that have not expired, newest first."""
        access = await self.org_access.check(user_id, slug, "invitations.list")
        docs = (
            await self.store["org_invitations"]
            .find({"orgId": access.org["_id"], "expiresAt": {"$gt": utcnow()}})
            .sort("createdAt", DESCENDING)
            .to_list(MAX_LISTED)
        )
        return [invitation_view(d) for d in docs]

    async def cancel_invitation(self, user_id: str, slug: str, invitation_id: str) -> None:
        """Cancel a pending invitation (its link stops working)."""
        access = await self.org_access.check(user_id, slug, "invitations.cancel")
        doc = await self.store["org_invitations"].find_one_and_delete(
            {"_id": invitation_id, "orgId": access.org["_id"]}
        )
        if doc is None:
            raise NotFound("Invitation not found")
        await self.audit.record(
            access.org["_id"], "member.invitation_cancelled", access.actor, {"email": doc["email"]}
        )

    async def accept(self, user_id: str, token: str) -> dict[str, Any]:
        """Join the org with the invited role: 404 unknown, 410 expired, 403 another email."""
        if not token or len(token) > 128:
            raise NotFound("Invitation not found")
        invitations = self.store["org_invitations"]
        doc = await invitations.find_one({"tokenHash": credential_digest(token)})
        if doc is None:
            raise NotFound("Invitation not found")
        if aware(doc["expiresAt"]) <= utcnow():
            raise Gone("This invitation has expired; ask for a new one")
        actor = await self.org_access.actor(user_id)
        if (actor.email or "").lower() != doc["email"]:
            raise Forbidden("This invitation was sent to another email address")
        org = await self.store.orgs.find_one({"_id": doc["orgId"], "deleting": {"$ne": True}})
        if org is None:
            raise NotFound("Invitation not found")
        claimed = await invitations.find_one_and_delete({"_id": doc["_id"], "tokenHash": doc["tokenHash"]})
        if claimed is None:
            raise NotFound("Invitation not found")
        try:
            await self.store.org_members.insert_one(
                {
                    "_id": new_id(),
                    "orgId": org["_id"],
                    "userId": user_id,
                    "role": claimed["role"],
                    "joinedAt": utcnow(),
                }
            )
        except DuplicateKeyError:
            raise Conflict("You are already a member of this org") from None
        meta = {"userId": user_id, "role": claimed["role"], "invitedBy": claimed.get("invitedBy")}
        await self.audit.record(org["_id"], "member.joined", actor, meta)
        return {"ok": True, "org": org_view(org), "role": claimed["role"]}

    async def delete_all(self, org_id: str) -> None:
        """Cancel every invitation of an org being deleted."""
        await self.store["org_invitations"].delete_many({"orgId": org_id})
