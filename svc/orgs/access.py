"""Who may do what in an org: the one rule table and the check every org operation makes.

`OrgAccess.check` is driven by the table `RULES` (action -> roles allowed, Pro needed).
Its order of checks: unknown slug and non-member are the same 404; a role not allowed is
403; a free org on a Pro action is 402. Decisions are written down in docs/orgs.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from svc.core import BadRequest, Document, Forbidden, NotFound, PaymentRequired, Store
from svc.identity import Accounts, user_email, user_emails
from svc.orgs.lookups import membership as membership_of
from svc.orgs.org_audit_log import SYSTEM, Actor

Role = Literal["owner", "admin", "member"]
MEMBERS: frozenset[str] = frozenset({"owner", "admin", "member"})
MANAGERS: frozenset[str] = frozenset({"owner", "admin"})
OWNER: frozenset[str] = frozenset({"owner"})

MAX_MEMBERS_LISTED = 1000
MAX_LISTED = 500
NOT_FOUND = "Org not found"
PRO_REQUIRED = "This feature requires the Pro plan"


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


def check_role(role: str) -> Role:
    """`admin` or `member`; 400 otherwise (ownership moves only by transfer)."""
    if role not in ("admin", "member"):
        raise BadRequest("role: must be admin or member")
    return role  # type: ignore[return-value]


def is_pro(org: Document) -> bool:
    """True on the Pro plan."""
    return org.get("plan") == "pro"


@dataclass(frozen=True)
class Access:
    """The org, the caller's role in it, and the caller as an audit actor."""

    org: Document
    role: str
    actor: Actor


class OrgAccess:
    """Org look-ups shared by every org service: the permission check, actors, managers."""

    def __init__(self, store: Store, accounts: Accounts) -> None:
        self.store = store
        self.accounts = accounts

    async def actor(self, user_id: str) -> Actor:
        """The user as an audit actor."""
        user = await self.accounts.get_user(user_id)
        return Actor(user_id, user.get("email"))

    async def actor_or_system(self, user_id: str | None) -> Actor:
        """The user as an audit actor, or the service itself when nobody is named."""
        if user_id is None:
            return SYSTEM
        return Actor(user_id, await user_email(self.store, user_id))

    async def check(self, user_id: str, slug: str, action: str) -> Access:
        """The one permission check: 404 (unknown or not a member), 403 (role), 402 (plan)."""
        rule = RULES[action]
        org = await self.by_slug(slug)
        membership = await membership_of(self.store, org["_id"], user_id) if org is not None else None
        if org is None or membership is None:
            raise NotFound(NOT_FOUND)
        if membership["role"] not in rule.roles:
            raise Forbidden(f"This action needs the role {' or '.join(sorted(rule.roles))}")
        if rule.pro and not is_pro(org):
            raise PaymentRequired(PRO_REQUIRED)
        return Access(org, membership["role"], await self.actor(user_id))

    async def by_slug(self, slug: str) -> Document | None:
        """A live org (one being deleted is gone already)."""
        return await self.store.orgs.find_one({"slug": slug, "deleting": {"$ne": True}})

    async def membership(self, org_id: str, user_id: str) -> Document:
        """The user's membership of the org; 404 `Member not found`."""
        doc = await membership_of(self.store, org_id, user_id)
        if doc is None:
            raise NotFound("Member not found")
        return doc

    async def manager_emails(self, org_id: str) -> list[str]:
        """Emails of the org's owner and admins."""
        managers = await self.store.org_members.find(
            {"orgId": org_id, "role": {"$in": sorted(MANAGERS)}}, {"userId": 1}
        ).to_list(MAX_MEMBERS_LISTED)
        emails = await user_emails(self.store, [m["userId"] for m in managers])
        return sorted(email for email in emails.values() if email)
