"""Responses of the organisation endpoints (spec "Organisations")."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field

from api.schemas.common import Day, Reply, Timestamp
from svc.templates import TemplateOut

Role = Literal["owner", "admin", "member"]


class Org(BaseModel):
    """The Organisation resource."""

    id: str
    name: str
    slug: str
    plan: Literal["free", "pro"]
    billingEmail: str | None
    avatarUrl: str | None
    governanceEnabled: bool
    upgradeApproval: Literal["breaking", "all"] = Field(
        default="breaking",
        description="under governance, which version moves of installs wait for approval (shown once set)",
    )
    currentPeriodEnd: Timestamp | None
    cancelAtPeriodEnd: bool
    createdAt: Timestamp


class OrgReply(Reply):
    """`{org}`: create, update, governance."""

    org: Org


class Membership(BaseModel):
    """An org of the caller and the caller's role in it."""

    role: Role
    org: Org


class MyOrgs(Reply):
    """GET /api/orgs/mine: oldest membership first."""

    orgs: list[Membership]


class OrgDetail(Reply):
    """GET /api/orgs/:slug."""

    org: Org
    memberCount: int
    recentTemplates: list[TemplateOut]
    myRole: Role


class Member(BaseModel):
    """A member with their profile."""

    memberId: str
    role: Role
    joinedAt: Timestamp
    userId: str
    name: str | None
    handle: str | None
    email: str | None
    avatarUrl: str | None


class MemberList(Reply):
    """GET /api/orgs/:slug/members: owner first, then by join date."""

    members: list[Member]


class RoleChanged(Reply):
    """PATCH /api/orgs/:slug/members/:userId/role."""

    ok: bool
    userId: str
    role: Literal["admin", "member"]


class Invitation(BaseModel):
    """A pending invitation (its token is only in the mail)."""

    id: str
    email: str
    role: Literal["admin", "member"]
    invitedBy: str | None
    expiresAt: Timestamp
    createdAt: Timestamp


class InvitationReply(Reply):
    """POST /api/orgs/:slug/invitations: the link is mailed at once."""

    invitation: Invitation


class InvitationList(Reply):
    """GET /api/orgs/:slug/invitations: pending and unexpired, newest first."""

    invitations: list[Invitation]


class Joined(Reply):
    """POST /api/invitations/:token/accept."""

    ok: bool
    org: Org
    role: Literal["admin", "member"]


class OrgKey(BaseModel):
    """An org key as listed (its value is never shown again)."""

    id: str
    label: str | None
    createdAt: Timestamp


class OrgKeyList(Reply):
    """GET /api/orgs/:slug/keys: newest first."""

    keys: list[OrgKey]


class CreatedOrgKey(OrgKey, Reply):
    """POST /api/orgs/:slug/keys: the raw key, shown once."""

    key: str = Field(description="svc_live_<32 hex>")


class ApprovalUpgrade(BaseModel):
    """The version move an approval request asks for."""

    fromVersion: int
    toVersion: int
    direction: Literal["upgrade", "rollback"]
    bump: Literal["MAJOR", "MINOR", "PATCH"]
    reason: str


class Approval(BaseModel):
    """The Approval request resource."""

    id: str
    orgId: str
    installId: str
    templateId: str
    templateName: str
    requestedBy: str | None
    requestedByEmail: str | None
    status: Literal["pending", "approved", "rejected"]
    note: str | None
    reviewedBy: str | None
    reviewedByEmail: str | None
    reviewedAt: Timestamp | None
    createdAt: Timestamp
    upgrade: ApprovalUpgrade | None = Field(
        default=None, description="set when the request is a version move of an existing install"
    )


class ApprovalList(Reply):
    """GET /api/orgs/:slug/approvals: newest first."""

    approvals: list[Approval]


class ApprovalReply(Reply):
    """POST and PATCH approvals: the request as stored."""

    approval: Approval


class OrgSecret(BaseModel):
    """A secret's name and dates (never its value)."""

    id: str
    key: str
    createdAt: Timestamp | None
    updatedAt: Timestamp | None


class OrgSecretList(Reply):
    """GET /api/orgs/:slug/secrets: by key."""

    secrets: list[OrgSecret]


class SecretSaved(Reply):
    """POST /api/orgs/:slug/secrets: the key as normalised (UPPER_SNAKE_CASE)."""

    ok: bool
    key: str


class BillingStatus(Reply):
    """GET /api/orgs/:slug/billing/status (as stored; the provider is not called)."""

    plan: Literal["free", "pro"]
    subscriptionStatus: str | None = Field(description="active, trialing, past_due, cancelled or null")
    trialEndsAt: Timestamp | None
    trialDaysLeft: int | None
    hasCustomer: bool
    planUpdatedAt: Timestamp | None
    isPro: bool
    isTrialing: bool


class CancelPlanReply(Reply):
    """POST /api/orgs/:slug/billing/cancel: Pro stays until the period ends."""

    ok: bool
    message: str


class AuditEvent(BaseModel):
    """One audit-log entry."""

    id: str
    actorId: str | None
    actorEmail: str | None
    action: str = Field(description="e.g. secret.created, member.role_changed")
    meta: dict[str, Any]
    createdAt: Timestamp


class AuditPage(Reply):
    """GET /api/orgs/:slug/audit-log: newest first."""

    events: list[AuditEvent]
    page: int
    limit: int


class DayCount(BaseModel):
    """Runs of one UTC day."""

    date: Day
    total: int
    success: int


class TemplateCount(BaseModel):
    """Runs of one template (a pipeline's id may be `pipeline:<install_id>:<name>`)."""

    templateId: str
    name: str | None
    total: int
    success: int


class OrgAnalytics(Reply):
    """GET /api/orgs/:slug/analytics."""

    fromDate: Timestamp
    toDate: Timestamp
    isPro: bool
    maxDays: int
    totalRuns: int
    successRate: float | None = Field(description="percent; null without runs")
    byDay: list[DayCount]
    byTemplate: list[TemplateCount]


class TimelineEntry(BaseModel):
    """One entry of an audit timeline (meta never holds a secret value)."""

    id: str
    kind: Literal[
        "gate", "egress", "key", "secret", "variable", "schedule", "version", "billing", "install", "org"
    ]
    action: str
    installId: str | None
    orgId: str | None
    actorId: str | None
    via: str | None
    meta: dict[str, Any]
    createdAt: Timestamp


class TimelinePage(Reply):
    """An audit timeline page, newest first; `nextCursor` is null on the last page.

    With `Accept: application/x-ndjson` the same entries come one JSON object a line, and the
    next cursor in the `X-Next-Cursor` header.
    """

    also: ClassVar[dict[str, dict[str, Any]]] = {
        "application/x-ndjson": {"type": "string", "description": "one TimelineEntry JSON object a line"}
    }

    events: list[TimelineEntry]
    nextCursor: str | None
