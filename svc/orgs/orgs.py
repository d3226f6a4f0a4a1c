"""Organisations and their members: create, read, update, delete, roles, transfer, audit log,
analytics. Every operation passes `OrgAccess.check` (svc/orgs/access.py) first.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from pymongo import ASCENDING, ReturnDocument
from pymongo.errors import DuplicateKeyError

from svc.core import (
    BadRequest,
    Conflict,
    Document,
    NotFound,
    Store,
    Timeline,
    TimelineQuery,
    iso,
    new_id,
    utcnow,
)
from svc.identity import ApiKeys, find_users, normalise_email
from svc.installs import Installs, org_install_ids
from svc.orgs.access import MAX_LISTED, MAX_MEMBERS_LISTED, NOT_FOUND, OrgAccess, check_role
from svc.orgs.bodies import CreateOrgBody, RoleBody, TransferBody, UpdateOrgBody
from svc.orgs.governance import Approvals
from svc.orgs.invitations import Invitations
from svc.orgs.org_analytics import AnalyticsQuery, OrgAnalytics
from svc.orgs.org_audit_log import AuditLog, AuditQuery
from svc.orgs.org_secrets import OrgSecrets
from svc.orgs.views import org_view
from svc.templates import Templates, org_templates
from svc.templates import view as template_view

RECENT_TEMPLATES = 5
SLUG_MAX = 48
SLUG_ATTEMPTS = 50
# Path words beside /api/orgs/:slug that a slug must not shadow.
RESERVED_SLUGS = frozenset({"mine"})
# Subscription states in which the provider still charges the org.
LIVE_SUBSCRIPTION = ("active", "trialing", "past_due")


def slugify(name: str) -> str:
    """URL-safe: lowercase ASCII letters, digits and single hyphens; `org` when nothing is left."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_name.lower()).strip("-")[:SLUG_MAX].strip("-")
    if slug in RESERVED_SLUGS:
        return f"{slug}-org"
    return slug or "org"


class Orgs:
    """The `orgs` and `org_members` collections."""

    def __init__(
        self,
        store: Store,
        org_access: OrgAccess,
        audit: AuditLog,
        api_keys: ApiKeys,
        invitations: Invitations,
        approvals: Approvals,
        org_secrets: OrgSecrets,
        templates: Templates,
        installs: Installs,
    ) -> None:
        self.store = store
        self.org_access = org_access
        self.audit = audit
        self.api_keys = api_keys
        self.invitations = invitations
        self.approvals = approvals
        self.org_secrets = org_secrets
        self.templates = templates
        self.installs = installs
        self.analytics_service = OrgAnalytics(store)

    async def create(self, user_id: str, body: CreateOrgBody) -> dict[str, Any]:
        """A new free org; the caller becomes its owner."""
        actor = await self.org_access.actor(user_id)
        base = slugify(body.name)
        now = utcnow()
        doc: Document = {
            "_id": new_id(),
            "name": body.name,
            "plan": "free",
            "billingEmail": actor.email,
            "avatarUrl": None,
            "governanceEnabled": False,
            "subscriptionStatus": None,
            "trialEndsAt": None,
            "currentPeriodEnd": None,
            "cancelAtPeriodEnd": False,
            "planUpdatedAt": None,
            "payCustomerId": None,
            "paySubscriptionId": None,
            "ownerId": user_id,
            "createdAt": now,
            "updatedAt": now,
        }
        for attempt in range(SLUG_ATTEMPTS + 1):
            if attempt < SLUG_ATTEMPTS:
                doc["slug"] = base if attempt == 0 else f"{base[: SLUG_MAX - 4]}-{attempt + 1}"
            else:
                doc["slug"] = f"{base[: SLUG_MAX - 9]}-{new_id()[:8]}"
            try:
                await self.store.orgs.insert_one(doc)
                break
            except DuplicateKeyError:
                continue
        else:
            raise Conflict("Could not find a free slug for this name; try another name")
        await self.store.org_members.insert_one(
            {"_id": new_id(), "orgId": doc["_id"], "userId": user_id, "role": "owner", "joinedAt": now}
        )
        await self.audit.record(doc["_id"], "org.created", actor, {"name": doc["name"], "slug": doc["slug"]})
        return org_view(doc)

    async def mine(self, user_id: str) -> list[dict[str, Any]]:
        """[{role, org}] for every org the user belongs to, oldest membership first."""
        memberships = (
            await self.store.org_members.find({"userId": user_id})
            .sort("joinedAt", ASCENDING)
            .to_list(MAX_LISTED)
        )
        orgs = {
            doc["_id"]: doc
            for doc in await self.store.orgs.find(
                {"_id": {"$in": [m["orgId"] for m in memberships]}, "deleting": {"$ne": True}}
            ).to_list(None)
        }
        return [
            {"role": m["role"], "org": org_view(orgs[m["orgId"]])} for m in memberships if m["orgId"] in orgs
        ]

    async def get(self, user_id: str, slug: str) -> dict[str, Any]:
        """{org, memberCount, recentTemplates, myRole}."""
        access = await self.org_access.check(user_id, slug, "org.read")
        org_id = access.org["_id"]
        templates = await org_templates(self.store, org_id, RECENT_TEMPLATES)
        return {
            "org": org_view(access.org),
            "memberCount": await self.store.org_members.count_documents({"orgId": org_id}),
            "recentTemplates": [template_view(t) for t in templates],
            "myRole": access.role,
        }

    async def update(self, user_id: str, slug: str, body: UpdateOrgBody) -> dict[str, Any]:
        """Change name, billingEmail or avatarUrl (the slug stays: links keep working)."""
        access = await self.org_access.check(user_id, slug, "org.update")
        changes: Document = {}
        if body.name is not None:
            if not body.name.strip():
                raise BadRequest("name: must not be blank")
            changes["name"] = body.name.strip()
        if "billingEmail" in body.model_fields_set:
            changes["billingEmail"] = normalise_email(body.billingEmail) if body.billingEmail else None
        if "avatarUrl" in body.model_fields_set:
            changes["avatarUrl"] = body.avatarUrl or None
        if not changes:
            return org_view(access.org)
        updated = await self.store.orgs.find_one_and_update(
            {"_id": access.org["_id"]},
            {"$set": {**changes, "updatedAt": utcnow()}},
            return_document=ReturnDocument.AFTER,
        )
        if updated is None:
            raise NotFound(NOT_FOUND)
        await self.audit.record(updated["_id"], "org.updated", access.actor, {"fields": sorted(changes)})
        return org_view(updated)

    async def delete(self, user_id: str, slug: str) -> None:
        """Delete the org. The writes are ordered so a crash midway leaves nothing reachable:

        1. mark the org `deleting` (every org look-up skips it from here on);
        2. revoke the org keys (database, then the key cache);
        3. cancel the invitations;
        4. cancel installs waiting for approval; give templates back to the owner and installs
           to the member who deployed them while still a member (else the owner);
        5. delete the org secrets;
        6. delete the org record, then the memberships (readers ignore memberships of a missing org).
        The audit events stay (append-only).
        """
        access = await self.org_access.check(user_id, slug, "org.delete")
        org = access.org
        if org.get("subscriptionStatus") in LIVE_SUBSCRIPTION and not org.get("cancelAtPeriodEnd"):
            raise Conflict(
                "The org has a live Pro subscription: cancel it first (POST /api/orgs/:slug/billing/cancel), "
                "then delete the org"
            )
        org_id, owner = org["_id"], {"kind": "user", "id": user_id}
        await self.store.orgs.update_one({"_id": org_id}, {"$set": {"deleting": True, "updatedAt": utcnow()}})
        await self.api_keys.revoke_org_keys(org_id)
        await self.invitations.delete_all(org_id)
        await self.approvals.cancel_waiting(org_id)
        await self.templates.hand_back(org_id, owner)
        # An install goes back to the member who deployed it (their card may pay for it), else the owner.
        members = set(await self.store.org_members.distinct("userId", {"orgId": org_id}))
        await self.installs.hand_back(org_id, members, owner)
        await self.org_secrets.delete_all(org_id)
        await self.audit.record(
            org_id, "org.deleted", access.actor, {"name": org["name"], "slug": org["slug"]}
        )
        await self.store.orgs.delete_one({"_id": org_id})
        await self.store.org_members.delete_many({"orgId": org_id})

    async def members(self, user_id: str, slug: str) -> list[dict[str, Any]]:
        """Every member with their profile, owner first, then by join date."""
        access = await self.org_access.check(user_id, slug, "members.list")
        memberships = (
            await self.store.org_members.find({"orgId": access.org["_id"]})
            .sort("joinedAt", ASCENDING)
            .to_list(MAX_MEMBERS_LISTED)
        )
        users = await find_users(
            self.store, [m["userId"] for m in memberships], "email", "name", "handle", "avatarUrl"
        )
        rank = {"owner": 0, "admin": 1, "member": 2}
        memberships.sort(key=lambda m: rank.get(m["role"], 3))
        return [
            {
                "memberId": m["_id"],
                "role": m["role"],
                "joinedAt": iso(m["joinedAt"]),
                "userId": m["userId"],
                "name": users.get(m["userId"], {}).get("name"),
                "handle": users.get(m["userId"], {}).get("handle"),
                "email": users.get(m["userId"], {}).get("email"),
                "avatarUrl": users.get(m["userId"], {}).get("avatarUrl"),
            }
            for m in memberships
        ]

    async def set_role(self, user_id: str, slug: str, target_id: str, body: RoleBody) -> dict[str, Any]:
        """Make a member admin or member; the owner's role cannot be changed (409)."""
        access = await self.org_access.check(user_id, slug, "members.set_role")
        role = check_role(body.role)
        target = await self.org_access.membership(access.org["_id"], target_id)
        if target["role"] == "owner":
            raise Conflict("The owner's role cannot be changed; transfer ownership instead")
        updated = await self.store.org_members.find_one_and_update(
            {"_id": target["_id"], "role": {"$ne": "owner"}},
            {"$set": {"role": role}},
            return_document=ReturnDocument.AFTER,
        )
        if updated is None:
            raise Conflict("The owner's role cannot be changed; transfer ownership instead")
        if target["role"] != role:
            meta = {"userId": target_id, "from": target["role"], "to": role}
            await self.audit.record(access.org["_id"], "member.role_changed", access.actor, meta)
        return {"ok": True, "userId": target_id, "role": role}

    async def remove_member(self, user_id: str, slug: str, target_id: str) -> None:
        """Owner or admin removes anyone but the owner; any member may remove themself."""
        action = "members.leave" if target_id == user_id else "members.remove"
        access = await self.org_access.check(user_id, slug, action)
        target = await self.org_access.membership(access.org["_id"], target_id)
        if target["role"] == "owner":
            if target_id == user_id:
                raise Conflict("The owner cannot leave the org; transfer ownership first or delete the org")
            raise Conflict("The owner cannot be removed")
        removed = await self.store.org_members.delete_one({"_id": target["_id"], "role": {"$ne": "owner"}})
        if removed.deleted_count:
            meta = {"userId": target_id, "role": target["role"], "self": target_id == user_id}
            await self.audit.record(access.org["_id"], "member.removed", access.actor, meta)

    async def transfer(self, user_id: str, slug: str, body: TransferBody) -> None:
        """Hand the org to another member; the old owner becomes a member."""
        access = await self.org_access.check(user_id, slug, "org.transfer")
        org = access.org
        if body.confirmation != org["name"]:
            raise BadRequest("Confirmation must match the org name exactly")
        target = await self.store.org_members.find_one({"orgId": org["_id"], "userId": body.newOwnerId})
        if target is None:
            raise NotFound("Target user is not a member")
        if body.newOwnerId == user_id:
            raise BadRequest("You already own this org")
        # One conditional sequence: each step states what it expects and the ones before are
        # undone when it finds otherwise. Promote first (an owner cannot be removed, so the target
        # can no longer leave), then move the org, then demote; a crash in between leaves two
        # owners, never none.
        promoted = await self.store.org_members.update_one(
            {"_id": target["_id"], "orgId": org["_id"], "userId": body.newOwnerId},
            {"$set": {"role": "owner"}},
        )
        if not promoted.matched_count:
            raise NotFound("Target user is not a member")  # they left meanwhile: nothing changed
        moved = await self.store.orgs.update_one(
            {"_id": org["_id"], "ownerId": user_id},
            {"$set": {"ownerId": body.newOwnerId, "updatedAt": utcnow()}},
        )
        if not moved.matched_count:
            await self.store.org_members.update_one(
                {"_id": target["_id"], "role": "owner"}, {"$set": {"role": target["role"]}}
            )
            raise Conflict("The org changed hands meanwhile; nothing was transferred")
        await self.store.org_members.update_one(
            {"orgId": org["_id"], "userId": user_id, "role": "owner"}, {"$set": {"role": "member"}}
        )
        meta = {"fromUserId": user_id, "toUserId": body.newOwnerId, "previousRole": target["role"]}
        await self.audit.record(org["_id"], "org.transferred", access.actor, meta)

    async def audit_log(self, user_id: str, slug: str, query: AuditQuery) -> dict[str, Any]:
        """{events, page, limit}, newest first."""
        access = await self.org_access.check(user_id, slug, "audit.read")
        start, end = query.from_, query.to  # Timestamp: already UTC
        if start is not None and end is not None and start > end:
            raise BadRequest("from: must not be after to")
        since = access.org.get("createdAt")  # no audit event of the org is older
        events = await self.audit.page(access.org["_id"], query.page, query.limit, start, end, since)
        return {"events": events, "page": query.page, "limit": query.limit}

    async def timeline(
        self, user_id: str, slug: str, query: TimelineQuery
    ) -> tuple[list[dict[str, Any]], str | None]:
        """The org's one timeline: its own audit events and those of its installs, newest first."""
        access = await self.org_access.check(user_id, slug, "audit.read")
        org_id = access.org["_id"]
        installs = await org_install_ids(self.store, org_id)
        scope = {"$or": [{"orgId": org_id}, {"installId": {"$in": installs[:MAX_LISTED]}}]}
        return await Timeline(self.store).page(scope, query)

    async def analytics(self, user_id: str, slug: str, query: AnalyticsQuery) -> dict[str, Any]:
        """Runs of the org's installs per day and per template."""
        access = await self.org_access.check(user_id, slug, "analytics.read")
        return await self.analytics_service.report(access.org, query)
