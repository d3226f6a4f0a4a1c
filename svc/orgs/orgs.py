"""Organisations: members and roles, invitations, org keys, plans, governance, the secret vault.

Every org operation goes through `Orgs.access`, driven by the one table `RULES`
(action → roles allowed, Pro needed). Its order of checks: unknown slug and
non-member are the same 404; a role not allowed is 403; a free org on a Pro
action is 402. Decisions are written down in docs/orgs.md.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import Field, field_validator
from pymongo import ASCENDING, DESCENDING, ReturnDocument
from pymongo.errors import DuplicateKeyError

from config.settings import Settings
from svc.core import (
    BadRequest,
    Conflict,
    Document,
    Forbidden,
    Gone,
    Mailer,
    NotFound,
    PaymentRequired,
    RequestBody,
    Store,
    TTLCache,
    Vault,
    aware,
    iso,
    tokens,
    utcnow,
)
from svc.identity import Accounts, Principal, normalise_email
from svc.installs import Installs
from svc.orgs.audit import SYSTEM, Actor, AuditLog, AuditQuery
from svc.orgs.org_analytics import AnalyticsQuery, OrgAnalytics
from svc.templates import view as template_view

Role = Literal["owner", "admin", "member"]
Plan = Literal["free", "pro"]
SubscriptionStatus = Literal["active", "trialing", "past_due", "cancelled"]
SUBSCRIPTION_STATUSES = ("active", "trialing", "past_due", "cancelled")
PRO_STATUSES = ("active", "trialing")

MEMBERS: frozenset[str] = frozenset({"owner", "admin", "member"})
MANAGERS: frozenset[str] = frozenset({"owner", "admin"})
OWNER: frozenset[str] = frozenset({"owner"})

INVITATION_LIFETIME = timedelta(days=7)
# Expired invitations are kept a while so that accepting one says "expired", not "not found".
INVITATION_PURGE_AFTER = timedelta(days=30)
RECENT_TEMPLATES = 5
MAX_MEMBERS_LISTED = 1000
MAX_ORG_KEYS = 100
MAX_LISTED = 500
SLUG_MAX = 48
SLUG_ATTEMPTS = 50
# Path words beside /api/orgs/:slug that a slug must not shadow.
RESERVED_SLUGS = frozenset({"mine"})
NOT_FOUND = "Org not found"
PRO_REQUIRED = "This feature requires the Pro plan"
# Subscription states in which the provider still charges the org.
LIVE_SUBSCRIPTION = ("active", "trialing", "past_due")


@dataclass(frozen=True)
class Rule:
    """Who may perform an org action: the roles allowed, and whether the org must be Pro."""

    roles: frozenset[str]
    pro: bool = False


# The spec's org table ("Who" column), one entry per route.
RULES: dict[str, Rule] = {
    "org.read": Rule(MEMBERS),
    "org.update": Rule(MANAGERS),
    "org.delete": Rule(OWNER),
    "org.transfer": Rule(OWNER),
    "members.list": Rule(MEMBERS),
    "members.set_role": Rule(MANAGERS),
    "members.remove": Rule(MANAGERS),
    "members.leave": Rule(MEMBERS),  # DELETE .../members/:userId on oneself ("or self")
    "invitations.create": Rule(MANAGERS),
    "invitations.list": Rule(MANAGERS),
    "invitations.cancel": Rule(MANAGERS),
    "keys.list": Rule(MEMBERS),
    "keys.create": Rule(MANAGERS),
    "keys.revoke": Rule(MANAGERS),
    "governance.set": Rule(MANAGERS, pro=True),
    "approvals.list": Rule(MEMBERS, pro=True),
    "approvals.create": Rule(MEMBERS, pro=True),
    "approvals.decide": Rule(MANAGERS, pro=True),
    "secrets.list": Rule(MEMBERS, pro=True),
    "secrets.set": Rule(MANAGERS, pro=True),
    "secrets.delete": Rule(MANAGERS, pro=True),
    "billing.status": Rule(MEMBERS),
    "billing.checkout": Rule(MANAGERS),
    "billing.portal": Rule(MANAGERS),
    "billing.cancel": Rule(OWNER),
    "audit.read": Rule(MANAGERS, pro=True),
    "analytics.read": Rule(MEMBERS),
}


# ---- request bodies -------------------------------------------------------------------------


class CreateOrgBody(RequestBody):
    """POST /api/orgs."""

    name: str = Field(min_length=1, max_length=100)

    @field_validator("name")
    @classmethod
    def _trimmed(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value.strip()


class UpdateOrgBody(RequestBody):
    """PATCH /api/orgs/:slug (any of the fields)."""

    name: str | None = Field(default=None, min_length=1, max_length=100)
    billingEmail: str | None = Field(default=None, max_length=254)
    avatarUrl: str | None = Field(default=None, max_length=2048)

    @field_validator("avatarUrl")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and value and not re.match(r"^https?://[^\s/]+", value):
            raise ValueError("must be an http(s) URL")
        return value


class RoleBody(RequestBody):
    """PATCH /api/orgs/:slug/members/:userId/role."""

    role: str = Field(max_length=20)


class TransferBody(RequestBody):
    """PATCH /api/orgs/:slug/transfer."""

    newOwnerId: str = Field(min_length=1, max_length=64)
    confirmation: str = Field(max_length=200)


class InvitationBody(RequestBody):
    """POST /api/orgs/:slug/invitations."""

    email: str = Field(min_length=3, max_length=254)
    role: str = Field(default="member", max_length=20)


class OrgKeyBody(RequestBody):
    """POST /api/orgs/:slug/keys."""

    label: str | None = Field(default=None, max_length=100)


class GovernanceBody(RequestBody):
    """PATCH /api/orgs/:slug/settings/governance."""

    enabled: bool


class ApprovalRequestBody(RequestBody):
    """POST /api/orgs/:slug/approvals."""

    installId: str = Field(min_length=1, max_length=64)
    templateId: str = Field(min_length=1, max_length=64)
    templateName: str = Field(min_length=1, max_length=200)


class ApprovalDecisionBody(RequestBody):
    """PATCH /api/orgs/:slug/approvals/:id."""

    status: Literal["approved", "rejected"]
    note: str | None = Field(default=None, max_length=2000)


class SecretBody(RequestBody):
    """POST /api/orgs/:slug/secrets."""

    key: str = Field(min_length=1, max_length=128)
    value: str = Field(min_length=1, max_length=65_536)


class ApprovalsQuery(RequestBody):
    """Query of GET /api/orgs/:slug/approvals."""

    status: Literal["pending", "approved", "rejected"] | None = None


# ---- pure helpers ---------------------------------------------------------------------------


def slugify(name: str) -> str:
    """URL-safe: lowercase ASCII letters, digits and single hyphens; `org` when nothing is left."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_name.lower()).strip("-")[:SLUG_MAX].strip("-")
    if slug in RESERVED_SLUGS:
        return f"{slug}-org"
    return slug or "org"


def secret_key(raw: str) -> str:
    """UPPER_SNAKE_CASE (`openai api-key` → `OPENAI_API_KEY`); 400 when nothing usable is left."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", raw.strip())
    key = re.sub(r"[^A-Za-z0-9]+", "_", spaced).strip("_").upper()
    if not key:
        raise BadRequest("key: must contain letters or digits")
    if key[0].isdigit():
        raise BadRequest("key: must start with a letter")
    return key[:128]


def check_role(role: str) -> Role:
    """`admin` or `member`; 400 otherwise (ownership moves only by transfer)."""
    if role not in ("admin", "member"):
        raise BadRequest("role: must be admin or member")
    return role  # type: ignore[return-value]


def org_view(doc: Document) -> dict[str, Any]:
    """The spec's Organisation resource."""
    return {
        "id": doc["_id"],
        "name": doc["name"],
        "slug": doc["slug"],
        "plan": doc.get("plan") or "free",
        "billingEmail": doc.get("billingEmail"),
        "avatarUrl": doc.get("avatarUrl"),
        "governanceEnabled": bool(doc.get("governanceEnabled")),
        "currentPeriodEnd": iso(doc.get("currentPeriodEnd")),
        "cancelAtPeriodEnd": bool(doc.get("cancelAtPeriodEnd")),
        "createdAt": iso(doc["createdAt"]),
    }


def approval_view(doc: Document) -> dict[str, Any]:
    """The spec's Approval request."""
    return {
        "id": doc["_id"],
        "orgId": doc["orgId"],
        "installId": doc["installId"],
        "templateId": doc["templateId"],
        "templateName": doc["templateName"],
        "requestedBy": doc.get("requestedBy"),
        "requestedByEmail": doc.get("requestedByEmail"),
        "status": doc["status"],
        "note": doc.get("note"),
        "reviewedBy": doc.get("reviewedBy"),
        "reviewedByEmail": doc.get("reviewedByEmail"),
        "reviewedAt": iso(doc.get("reviewedAt")),
        "createdAt": iso(doc["createdAt"]),
    }


def is_pro(org: Document) -> bool:
    """True on the Pro plan."""
    return org.get("plan") == "pro"


@dataclass(frozen=True)
class Access:
    """The org, the caller's role in it, and the caller as an audit actor."""

    org: Document
    role: str
    actor: Actor


# ---- the service ----------------------------------------------------------------------------


class Orgs:
    """Organisations, their members, invitations, keys, plans, governance and secrets."""

    def __init__(
        self,
        store: Store,
        accounts: Accounts,
        mailer: Mailer,
        vault: Vault,
        key_cache: TTLCache[str, Principal],
        settings: Settings,
        installs: Installs | None = None,
    ) -> None:
        self.store = store
        self.accounts = accounts
        self.mailer = mailer
        self.vault = vault
        self.key_cache = key_cache
        self.public_url = settings.public_url
        self.installs = installs
        self.audit = AuditLog(store)
        self.analytics_service = OrgAnalytics(store)

    # ---- access -------------------------------------------------------------------------

    async def _actor(self, user_id: str) -> Actor:
        user = await self.accounts.get_user(user_id)
        return Actor(user_id, user.get("email"))

    async def access(self, user_id: str, slug: str, action: str) -> Access:
        """The one permission check: 404 (unknown or not a member), 403 (role), 402 (plan)."""
        rule = RULES[action]
        org = await self.store.orgs.find_one({"slug": slug, "deleting": {"$ne": True}})
        membership = (
            await self.store.org_members.find_one({"orgId": org["_id"], "userId": user_id})
            if org is not None
            else None
        )
        if org is None or membership is None:
            raise NotFound(NOT_FOUND)
        if membership["role"] not in rule.roles:
            raise Forbidden(f"This action needs the role {' or '.join(sorted(rule.roles))}")
        if rule.pro and not is_pro(org):
            raise PaymentRequired(PRO_REQUIRED)
        return Access(org, membership["role"], await self._actor(user_id))

    # ---- orgs ---------------------------------------------------------------------------

    async def create(self, user_id: str, body: CreateOrgBody) -> dict[str, Any]:
        """A new free org; the caller becomes its owner."""
        actor = await self._actor(user_id)
        base = slugify(body.name)
        now = utcnow()
        doc: Document = {
            "_id": tokens.new_id(),
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
                doc["slug"] = f"{base[: SLUG_MAX - 9]}-{tokens.new_id()[:8]}"
            try:
                await self.store.orgs.insert_one(doc)
                break
            except DuplicateKeyError:
                continue
        else:
            raise Conflict("Could not find a free slug for this name; try another name")
        await self.store.org_members.insert_one(
            {"_id": tokens.new_id(), "orgId": doc["_id"], "userId": user_id, "role": "owner", "joinedAt": now}
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
        access = await self.access(user_id, slug, "org.read")
        org_id = access.org["_id"]
        templates = (
            await self.store["templates"]
            .find({"owner.kind": "org", "owner.id": org_id, "kind": "template"})
            .sort([("createdAt", DESCENDING), ("_id", DESCENDING)])
            .to_list(RECENT_TEMPLATES)
        )
        return {
            "org": org_view(access.org),
            "memberCount": await self.store.org_members.count_documents({"orgId": org_id}),
            "recentTemplates": [template_view(t) for t in templates],
            "myRole": access.role,
        }

    async def update(self, user_id: str, slug: str, body: UpdateOrgBody) -> dict[str, Any]:
        """Change name, billingEmail or avatarUrl (the slug stays: links keep working)."""
        access = await self.access(user_id, slug, "org.update")
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
        access = await self.access(user_id, slug, "org.delete")
        org = access.org
        if org.get("subscriptionStatus") in LIVE_SUBSCRIPTION and not org.get("cancelAtPeriodEnd"):
            raise Conflict(
                "The org has a live Pro subscription: cancel it first (POST /api/orgs/:slug/billing/cancel), "
                "then delete the org"
            )
        org_id, owner = org["_id"], {"kind": "user", "id": user_id}
        await self.store.orgs.update_one({"_id": org_id}, {"$set": {"deleting": True, "updatedAt": utcnow()}})
        await self._revoke_keys({"orgId": org_id})
        await self.store["org_invitations"].delete_many({"orgId": org_id})
        as_org = {"owner.kind": "org", "owner.id": org_id}
        # Nobody is left to approve installs waiting for governance: they are cancelled.
        if self.installs is not None:
            waiting = await self.store.installs.find({**as_org, "approval": "pending"}, {"_id": 1}).to_list(
                None
            )
            for install in waiting:
                await self.installs.settle_approval(install["_id"], org_id, approved=False)
        await self.store["templates"].update_many(as_org, {"$set": {"owner": owner, "updatedAt": utcnow()}})
        # An install goes back to the member who deployed it (their card may pay for it), else the owner.
        members = set(await self.store.org_members.distinct("userId", {"orgId": org_id}))
        deployers = await self.store.installs.distinct(
            "deployedBy", {**as_org, "deployedBy": {"$type": "string"}}
        )
        for deployer in [d for d in deployers if d in members]:  # former members get nothing
            await self.store.installs.update_many(
                {**as_org, "deployedBy": deployer},
                {"$set": {"owner": {"kind": "user", "id": deployer}, "updatedAt": utcnow()}},
            )
        await self.store.installs.update_many(as_org, {"$set": {"owner": owner, "updatedAt": utcnow()}})
        await self.store["org_secrets"].delete_many({"orgId": org_id})
        await self.audit.record(
            org_id, "org.deleted", access.actor, {"name": org["name"], "slug": org["slug"]}
        )
        await self.store.orgs.delete_one({"_id": org_id})
        await self.store.org_members.delete_many({"orgId": org_id})

    async def _revoke_keys(self, query: Document) -> None:
        docs = await self.store.api_keys.find(query, {"keyHash": 1}).to_list(None)
        for doc in docs:
            self.key_cache.revoke(doc["keyHash"])
        await self.store.api_keys.delete_many({"_id": {"$in": [d["_id"] for d in docs]}})

    # ---- members ------------------------------------------------------------------------

    async def members(self, user_id: str, slug: str) -> list[dict[str, Any]]:
        """Every member with their profile, owner first, then by join date."""
        access = await self.access(user_id, slug, "members.list")
        memberships = (
            await self.store.org_members.find({"orgId": access.org["_id"]})
            .sort("joinedAt", ASCENDING)
            .to_list(MAX_MEMBERS_LISTED)
        )
        users = {
            u["_id"]: u
            for u in await self.store.users.find(
                {"_id": {"$in": [m["userId"] for m in memberships]}},
                {"email": 1, "name": 1, "handle": 1, "avatarUrl": 1},
            ).to_list(None)
        }
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
        access = await self.access(user_id, slug, "members.set_role")
        role = check_role(body.role)
        target = await self._membership(access.org["_id"], target_id)
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
        access = await self.access(user_id, slug, action)
        target = await self._membership(access.org["_id"], target_id)
        if target["role"] == "owner":
            if target_id == user_id:
                raise Conflict("The owner cannot leave the org; transfer ownership first or delete the org")
            raise Conflict("The owner cannot be removed")
        removed = await self.store.org_members.delete_one({"_id": target["_id"], "role": {"$ne": "owner"}})
        if removed.deleted_count:
            meta = {"userId": target_id, "role": target["role"], "self": target_id == user_id}
            await self.audit.record(access.org["_id"], "member.removed", access.actor, meta)

    async def _membership(self, org_id: str, user_id: str) -> Document:
        doc = await self.store.org_members.find_one({"orgId": org_id, "userId": user_id})
        if doc is None:
            raise NotFound("Member not found")
        return doc

    async def transfer(self, user_id: str, slug: str, body: TransferBody) -> None:
        """Hand the org to another member; the old owner becomes a member."""
        access = await self.access(user_id, slug, "org.transfer")
        org = access.org
        if body.confirmation != org["name"]:
            raise BadRequest("Confirmation must match the org name exactly")
        target = await self.store.org_members.find_one({"orgId": org["_id"], "userId": body.newOwnerId})
        if target is None:
            raise NotFound("Target user is not a member")
        if body.newOwnerId == user_id:
            raise BadRequest("You already own this org")
        # Promote first: a crash in between leaves two owners, never none.
        await self.store.org_members.update_one({"_id": target["_id"]}, {"$set": {"role": "owner"}})
        await self.store.orgs.update_one(
            {"_id": org["_id"]}, {"$set": {"ownerId": body.newOwnerId, "updatedAt": utcnow()}}
        )
        await self.store.org_members.update_one(
            {"orgId": org["_id"], "userId": user_id}, {"$set": {"role": "member"}}
        )
        meta = {"fromUserId": user_id, "toUserId": body.newOwnerId, "previousRole": target["role"]}
        await self.audit.record(org["_id"], "org.transferred", access.actor, meta)

    # ---- invitations --------------------------------------------------------------------

    async def invite(self, user_id: str, slug: str, body: InvitationBody) -> dict[str, Any]:
        """Invite an email (replacing a pending invitation's token) and mail the link at once."""
        access = await self.access(user_id, slug, "invitations.create")
        role = check_role(body.role)
        email = normalise_email(body.email)
        org = access.org
        existing = await self.store.users.find_one({"email": email}, {"_id": 1})
        if existing is not None and await self.store.org_members.count_documents(
            {"orgId": org["_id"], "userId": existing["_id"]}
        ):
            raise Conflict("That person is already a member of this org")
        raw = tokens.new_session_token()
        now = utcnow()
        expires = now + INVITATION_LIFETIME
        fields = {
            "role": role,
            "tokenHash": tokens.digest(raw),
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
                    {"$set": fields, "$setOnInsert": {"_id": tokens.new_id()}},
                    upsert=True,
                    return_document=ReturnDocument.AFTER,
                )
            except DuplicateKeyError:
                continue
        raise Conflict("Concurrent update; try again")

    async def invitations(self, user_id: str, slug: str) -> list[dict[str, Any]]:
        """Pending invitations that have not expired, newest first."""
        access = await self.access(user_id, slug, "invitations.list")
        docs = (
            await self.store["org_invitations"]
            .find({"orgId": access.org["_id"], "expiresAt": {"$gt": utcnow()}})
            .sort("createdAt", DESCENDING)
            .to_list(MAX_LISTED)
        )
        return [invitation_view(d) for d in docs]

    async def cancel_invitation(self, user_id: str, slug: str, invitation_id: str) -> None:
        """Cancel a pending invitation (its link stops working)."""
        access = await self.access(user_id, slug, "invitations.cancel")
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
        doc = await invitations.find_one({"tokenHash": tokens.digest(token)})
        if doc is None:
            raise NotFound("Invitation not found")
        if aware(doc["expiresAt"]) <= utcnow():
            raise Gone("This invitation has expired; ask for a new one")
        actor = await self._actor(user_id)
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
                    "_id": tokens.new_id(),
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

    # ---- org keys -----------------------------------------------------------------------

    async def keys(self, user_id: str, slug: str) -> list[dict[str, Any]]:
        """The org's keys, newest first, without their values."""
        access = await self.access(user_id, slug, "keys.list")
        docs = (
            await self.store.api_keys.find({"orgId": access.org["_id"]})
            .sort("createdAt", DESCENDING)
            .to_list(MAX_ORG_KEYS)
        )
        return [{"id": d["_id"], "label": d.get("label"), "createdAt": iso(d["createdAt"])} for d in docs]

    async def create_key(self, user_id: str, slug: str, body: OrgKeyBody) -> dict[str, Any]:
        """A new org key; the raw value is in this response only (only its hash is stored)."""
        access = await self.access(user_id, slug, "keys.create")
        org_id = access.org["_id"]
        if await self.store.api_keys.count_documents({"orgId": org_id}) >= MAX_ORG_KEYS:
            raise Conflict(f"Key limit reached ({MAX_ORG_KEYS} keys); revoke one first")
        raw = tokens.new_api_key()
        doc = {
            "_id": tokens.new_id(),
            "keyHash": tokens.digest(raw),
            "userId": None,
            "orgId": org_id,
            "label": body.label,
            "installId": None,
            "createdBy": user_id,
            "createdAt": utcnow(),
        }
        await self.store.api_keys.insert_one(doc)
        await self.audit.record(
            org_id, "key.created", access.actor, {"keyId": doc["_id"], "label": body.label}
        )
        return {"id": doc["_id"], "key": raw, "label": body.label, "createdAt": iso(doc["createdAt"])}

    async def revoke_key(self, user_id: str, slug: str, key_id: str) -> None:
        """Revoke at once: the next request with the key is 401."""
        access = await self.access(user_id, slug, "keys.revoke")
        doc = await self.store.api_keys.find_one({"_id": key_id, "orgId": access.org["_id"]})
        if doc is None:
            raise NotFound("Key not found")
        await self._revoke_keys({"_id": key_id, "orgId": access.org["_id"]})
        await self.audit.record(access.org["_id"], "key.revoked", access.actor, {"keyId": key_id})

    # ---- plans --------------------------------------------------------------------------

    async def apply_subscription(
        self,
        org_id: str,
        *,
        status: str | None,
        trial_end: datetime | None,
        current_period_end: datetime | None,
        cancel_at_period_end: bool,
        customer_id: str | None,
        subscription_id: str | None,
        source: str = "payment_provider",
    ) -> dict[str, Any]:
        """Write a subscription's state; the plan is derived (pro while active or trialing).

        The one place plans change: the payment webhook and `svc orgs set-plan` call it.
        `customer_id` / `subscription_id` of None keep what is stored. Audited as
        `billing.subscription_updated`.
        """
        if status is not None and status not in SUBSCRIPTION_STATUSES:
            raise BadRequest(f"status: must be one of {', '.join(SUBSCRIPTION_STATUSES)} or null")
        plan: Plan = "pro" if status in PRO_STATUSES else "free"
        changes: Document = {
            "plan": plan,
            "subscriptionStatus": status,
            "trialEndsAt": trial_end,
            "currentPeriodEnd": current_period_end,
            "cancelAtPeriodEnd": cancel_at_period_end,
            "planUpdatedAt": utcnow(),
            "updatedAt": utcnow(),
        }
        if customer_id is not None:
            changes["payCustomerId"] = customer_id
        if subscription_id is not None:
            changes["paySubscriptionId"] = subscription_id
        before = await self.store.orgs.find_one_and_update(
            {"_id": org_id, "deleting": {"$ne": True}}, {"$set": changes}
        )
        if before is None:
            raise NotFound(NOT_FOUND)
        meta = {
            "source": source,
            "status": status,
            "plan": plan,
            "previousPlan": before.get("plan") or "free",
            "trialEndsAt": iso(trial_end),
            "currentPeriodEnd": iso(current_period_end),
            "cancelAtPeriodEnd": cancel_at_period_end,
        }
        await self.audit.record(org_id, "billing.subscription_updated", SYSTEM, meta)
        # past_due is a payment retry, not the end: approvals wait for the outcome.
        if plan == "free" and (before.get("plan") or "free") == "pro" and status != "past_due":
            await self._lapse_governance({**before, **changes})
        return org_view({**before, **changes})

    async def _lapse_governance(self, org: Document) -> None:
        """Governance applies only while Pro, and deciding is a Pro action: when the plan lapses,
        the requests still waiting are approved, as new installs no longer wait."""
        pending = (
            await self.store["org_approvals"].find({"orgId": org["_id"], "status": "pending"}).to_list(None)
        )
        for request in pending:
            await self._decide(org, request["_id"], "approved", "Governance lapsed with the Pro plan", SYSTEM)

    async def set_plan(self, slug: str, plan: Plan) -> dict[str, Any]:
        """Operator override (`svc orgs set-plan`): pro as an active subscription, free as none."""
        org = await self.store.orgs.find_one({"slug": slug, "deleting": {"$ne": True}})
        if org is None:
            raise NotFound(NOT_FOUND)
        return await self.apply_subscription(
            org["_id"],
            status="active" if plan == "pro" else None,
            trial_end=None,
            current_period_end=None,
            cancel_at_period_end=False,
            customer_id=None,
            subscription_id=None,
            source="operator",
        )

    async def billing_status(self, user_id: str, slug: str) -> dict[str, Any]:
        """The plan and subscription as stored (the payment provider is not called)."""
        org = (await self.access(user_id, slug, "billing.status")).org
        status = org.get("subscriptionStatus")
        trial_end = org.get("trialEndsAt")
        days_left = None
        if trial_end is not None:
            seconds = (aware(trial_end) - utcnow()).total_seconds()
            days_left = max(0, math.ceil(seconds / 86400))
        return {
            "plan": org.get("plan") or "free",
            "subscriptionStatus": status,
            "trialEndsAt": iso(trial_end),
            "trialDaysLeft": days_left,
            "hasCustomer": bool(org.get("payCustomerId")),
            "planUpdatedAt": iso(org.get("planUpdatedAt")),
            "isPro": is_pro(org),
            "isTrialing": status == "trialing",
        }

    # ---- governance and approvals -------------------------------------------------------

    async def set_governance(self, user_id: str, slug: str, body: GovernanceBody) -> dict[str, Any]:
        """Turn approval of new deployments on or off."""
        access = await self.access(user_id, slug, "governance.set")
        updated = await self.store.orgs.find_one_and_update(
            {"_id": access.org["_id"]},
            {"$set": {"governanceEnabled": body.enabled, "updatedAt": utcnow()}},
            return_document=ReturnDocument.AFTER,
        )
        assert updated is not None
        if bool(access.org.get("governanceEnabled")) != body.enabled:
            action = "governance.enabled" if body.enabled else "governance.disabled"
            await self.audit.record(updated["_id"], action, access.actor, {})
        return org_view(updated)

    async def requires_approval(self, owner: dict[str, str]) -> bool:
        """Governance port: a new install for this owner must wait for approval (Pro org, enabled)."""
        if owner.get("kind") != "org":
            return False
        org = await self.store.orgs.find_one({"_id": owner["id"]}, {"plan": 1, "governanceEnabled": 1})
        return org is not None and is_pro(org) and bool(org.get("governanceEnabled"))

    async def request_approval(self, install: Document, principal: Principal) -> str:
        """Governance port: the automatic request for a gated install; owners and admins are emailed."""
        requestor_id = principal.user_id
        if requestor_id is None and principal.key_id is not None:
            key = await self.store.api_keys.find_one({"_id": principal.key_id}, {"createdBy": 1})
            requestor_id = (key or {}).get("createdBy")
        actor = await self._actor_or_system(requestor_id)
        org = await self.store.orgs.find_one({"_id": install["owner"]["id"]})
        assert org is not None
        return await self._open_request(
            org, install["_id"], install["templateId"], install["templateName"], actor
        )

    async def _actor_or_system(self, user_id: str | None) -> Actor:
        if user_id is None:
            return SYSTEM
        user = await self.store.users.find_one({"_id": user_id}, {"email": 1})
        return Actor(user_id, user.get("email") if user else None)

    async def _open_request(
        self, org: Document, install_id: str, template_id: str, template_name: str, actor: Actor
    ) -> str:
        doc = {
            "_id": tokens.new_id(),
            "orgId": org["_id"],
            "installId": install_id,
            "templateId": template_id,
            "templateName": template_name,
            "requestedBy": actor.id,
            "requestedByEmail": actor.email,
            "status": "pending",
            "note": None,
            "reviewedBy": None,
            "reviewedByEmail": None,
            "reviewedAt": None,
            "createdAt": utcnow(),
        }
        await self.store["org_approvals"].insert_one(doc)
        meta = {"approvalId": doc["_id"], "installId": install_id, "templateId": template_id}
        await self.audit.record(org["_id"], "approval.requested", actor, meta)
        link = f"{self.public_url}/orgs/{org['slug']}/approvals"
        for email in await self._manager_emails(org["_id"]):
            await self.mailer.send(
                email,
                f"Deployment approval requested: {template_name}",
                f"{actor.email or 'An org key'} asks to deploy {template_name} (install {install_id}) "
                f"in {org['name']}.\n\nReview it: {link}",
                kind="org_approval_requested",
            )
        return str(doc["_id"])

    async def _manager_emails(self, org_id: str) -> list[str]:
        managers = await self.store.org_members.find(
            {"orgId": org_id, "role": {"$in": sorted(MANAGERS)}}, {"userId": 1}
        ).to_list(MAX_MEMBERS_LISTED)
        users = await self.store.users.find(
            {"_id": {"$in": [m["userId"] for m in managers]}}, {"email": 1}
        ).to_list(None)
        return sorted(u["email"] for u in users if u.get("email"))

    async def approvals(self, user_id: str, slug: str, status: str | None) -> list[dict[str, Any]]:
        """The org's approval requests, newest first, optionally of one status."""
        access = await self.access(user_id, slug, "approvals.list")
        query: Document = {"orgId": access.org["_id"]}
        if status is not None:
            query["status"] = status
        docs = (
            await self.store["org_approvals"]
            .find(query)
            .sort([("createdAt", DESCENDING), ("_id", DESCENDING)])
            .to_list(MAX_LISTED)
        )
        return [approval_view(d) for d in docs]

    async def create_approval(self, user_id: str, slug: str, body: ApprovalRequestBody) -> dict[str, Any]:
        """A request made by hand for one of the org's installs; owners and admins are emailed."""
        access = await self.access(user_id, slug, "approvals.create")
        install = await self.store.installs.find_one(
            {"_id": body.installId, "owner.kind": "org", "owner.id": access.org["_id"]},
            {"templateId": 1, "templateName": 1},
        )
        if install is None:
            raise NotFound("Install not found")
        if body.templateId != install["templateId"]:
            raise BadRequest("templateId: not the template of this install")
        # The mailed name is the install's own, not text the requester typed.
        approval_id = await self._open_request(
            access.org, body.installId, install["templateId"], install["templateName"], access.actor
        )
        doc = await self.store["org_approvals"].find_one({"_id": approval_id})
        assert doc is not None
        return approval_view(doc)

    async def decide(
        self, user_id: str, slug: str, approval_id: str, body: ApprovalDecisionBody
    ) -> dict[str, Any]:
        """pending → approved or rejected (once; 409 after); the install follows; the requestor is emailed."""
        access = await self.access(user_id, slug, "approvals.decide")
        decided = await self._decide(access.org, approval_id, body.status, body.note, access.actor)
        if decided is None:
            existing = await self.store["org_approvals"].find_one(
                {"_id": approval_id, "orgId": access.org["_id"]}
            )
            if existing is None:
                raise NotFound("Approval request not found")
            raise Conflict(f"Approval request is already {existing['status']}")
        return approval_view(decided)

    async def _decide(
        self, org: Document, approval_id: str, status: str, note: str | None, actor: Actor
    ) -> Document | None:
        """Settle one pending request (None when it is not pending): install, audit, mail."""
        decided = await self.store["org_approvals"].find_one_and_update(
            {"_id": approval_id, "orgId": org["_id"], "status": "pending"},
            {
                "$set": {
                    "status": status,
                    "note": note,
                    "reviewedBy": actor.id,
                    "reviewedByEmail": actor.email,
                    "reviewedAt": utcnow(),
                }
            },
            return_document=ReturnDocument.AFTER,
        )
        if decided is None:
            return None
        if self.installs is not None:
            await self.installs.settle_approval(decided["installId"], org["_id"], status == "approved")
        action = "approval.approved" if status == "approved" else "approval.rejected"
        meta = {"approvalId": approval_id, "installId": decided["installId"], "note": note}
        await self.audit.record(org["_id"], action, actor, meta)
        if decided.get("requestedByEmail"):
            note_text = f"\n\nNote from the reviewer: {note}" if note else ""
            await self.mailer.send(
                decided["requestedByEmail"],
                f"Deployment {status}: {decided['templateName']}",
                f"{actor.email or 'The service'} {status} the deployment of {decided['templateName']} "
                f"(install {decided['installId']}) in {org['name']}.{note_text}",
                kind="org_approval_decided",
            )
        return decided

    # ---- the secret vault ---------------------------------------------------------------

    async def secrets(self, user_id: str, slug: str) -> list[dict[str, Any]]:
        """Secret names and dates (never values), by key."""
        access = await self.access(user_id, slug, "secrets.list")
        docs = (
            await self.store["org_secrets"]
            .find({"orgId": access.org["_id"]}, {"valueEncrypted": 0})
            .sort("key", ASCENDING)
            .to_list(MAX_LISTED)
        )
        return [
            {
                "id": d["_id"],
                "key": d["key"],
                "createdAt": iso(d.get("createdAt")),
                "updatedAt": iso(d.get("updatedAt")),
            }
            for d in docs
        ]

    async def set_secret(self, user_id: str, slug: str, body: SecretBody) -> str:
        """Create or replace a secret (encrypted); audited as created or updated, never with the value."""
        access = await self.access(user_id, slug, "secrets.set")
        key = secret_key(body.key)
        org_id = access.org["_id"]
        now = utcnow()
        collection = self.store["org_secrets"]
        existing = await collection.count_documents({"orgId": org_id, "key": key}) > 0
        if not existing and await collection.count_documents({"orgId": org_id}) >= MAX_LISTED:
            raise Conflict(f"Secret limit reached ({MAX_LISTED}); delete one first")
        for _ in range(2):
            try:
                result = await collection.update_one(
                    {"orgId": org_id, "key": key},
                    {
                        "$set": {"valueEncrypted": self.vault.encrypt(body.value), "updatedAt": now},
                        "$setOnInsert": {"_id": tokens.new_id(), "createdAt": now},
                    },
                    upsert=True,
                )
                break
            except DuplicateKeyError:
                continue
        else:
            raise Conflict("Concurrent update; try again")
        action = "secret.created" if result.upserted_id is not None else "secret.updated"
        await self.audit.record(org_id, action, access.actor, {"key": key})
        return key

    async def delete_secret(self, user_id: str, slug: str, raw_key: str) -> None:
        """Remove a secret; 404 when there is none of that name."""
        access = await self.access(user_id, slug, "secrets.delete")
        key = secret_key(raw_key)
        deleted = await self.store["org_secrets"].delete_one({"orgId": access.org["_id"], "key": key})
        if not deleted.deleted_count:
            raise NotFound("Secret not found")
        await self.audit.record(access.org["_id"], "secret.deleted", access.actor, {"key": key})

    # ---- audit log and analytics --------------------------------------------------------

    async def audit_log(self, user_id: str, slug: str, query: AuditQuery) -> dict[str, Any]:
        """{events, page, limit}, newest first."""
        access = await self.access(user_id, slug, "audit.read")
        start, end = query.from_, query.to  # Timestamp: already UTC
        if start is not None and end is not None and start > end:
            raise BadRequest("from: must not be after to")
        events = await self.audit.page(access.org["_id"], query.page, query.limit, start, end)
        return {"events": events, "page": query.page, "limit": query.limit}

    async def analytics(self, user_id: str, slug: str, query: AnalyticsQuery) -> dict[str, Any]:
        """Runs of the org's installs per day and per template."""
        access = await self.access(user_id, slug, "analytics.read")
        return await self.analytics_service.report(access.org, query)


def invitation_view(doc: Document) -> dict[str, Any]:
    """An invitation as listed (the token is never shown again)."""
    return {
        "id": doc["_id"],
        "email": doc["email"],
        "role": doc["role"],
        "invitedBy": doc.get("invitedBy"),
        "expiresAt": iso(doc["expiresAt"]),
        "createdAt": iso(doc["createdAt"]),
    }
