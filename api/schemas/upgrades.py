"""Responses of an install's versions: what is available, the plan of a move, the move itself
(docs/upgrades.md)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from api.schemas.common import Reply, Timestamp
from api.schemas.installs import DeployedAgent

Bump = Literal["MAJOR", "MINOR", "PATCH"]
Decision = Literal["allow", "require_approval", "deny"]
AutoMode = Literal["off", "patch", "minor"]


class ChangeLogEntry(BaseModel):
    """A published version a move crosses."""

    version: int
    semver: str | None
    bump: Literal["INITIAL", "MAJOR", "MINOR", "PATCH"] | None
    changeLog: str | None
    publishedAt: Timestamp | None


class HistoryEntry(BaseModel):
    """A version the install has been on, and how it got there."""

    version: int
    semver: str | None
    action: Literal["install", "upgrade", "rollback"]
    fromVersion: int | None
    bump: Bump | None
    actorId: str | None = Field(description="null: the service (automatic upgrades)")
    via: str | None
    at: Timestamp


class PendingUpgrade(BaseModel):
    """A move waiting for the org's approval."""

    approvalId: str | None
    toVersion: int
    direction: Literal["upgrade", "rollback"]
    requestedBy: str | None
    requestedAt: Timestamp | None


class InstallVersions(Reply):
    """GET /api/installs/:installId/versions."""

    installId: str
    templateId: str
    templateStatus: str | None
    currentVersion: int
    currentSemver: str | None
    latestVersion: int
    latestSemver: str | None
    updateAvailable: bool
    bump: Bump | None = Field(description="the class of moving to the latest version, for this install")
    reasons: list[str]
    widensPermissions: bool
    changeLogs: list[ChangeLogEntry]
    previousVersion: int | None
    autoUpgrade: AutoMode
    pendingUpgrade: PendingUpgrade | None
    history: list[HistoryEntry]


class InstallVersionRef(BaseModel):
    """A version of the install's template."""

    version: int
    semver: str | None


class TargetVersionRef(InstallVersionRef):
    """The version a move goes to."""

    changeLog: str | None
    publishedAt: Timestamp | None


class ReachChange(BaseModel):
    """Requests an agent's policy now decides differently."""

    host: str
    methods: list[str]
    path: str
    before: Decision
    after: Decision


class AgentReach(BaseModel):
    """One agent whose reach changes."""

    agent: str
    change: Literal["added", "removed", "renamed", "changed"]
    renamedFrom: str | None = None
    widened: list[ReachChange]
    narrowed: list[ReachChange]
    mcp: list[str] = Field(
        default_factory=list,
        description="what lets the agent call MCP tools it could not before: a server it may now use, "
        "a server that now reaches another server, its tool rules widened (accepted with the rest)",
    )


class Permissions(BaseModel):
    """The reach changes; widened ones are accepted by sending `acceptance` back."""

    changes: list[AgentReach]
    widened: bool
    acceptance: str | None = Field(description="send as acceptPermissions to accept the widened reach")


class PlatformChange(BaseModel):
    """What the driver does to one agent upstream."""

    key: str
    action: Literal["update", "create", "remove", "keep"]
    detail: str


class PlatformPlan(BaseModel):
    """What happens on the platform."""

    id: str
    inPlace: bool
    reason: str | None
    changes: list[PlatformChange]
    runs: str | None = Field(default=None, description="managed runtime: what happens to runs")


class Price(BaseModel):
    """A price and how it reads."""

    pricingModel: str
    priceUsdCents: int | None
    label: str


class ScheduledPrice(Price):
    """A price change waiting for the next billing period."""

    effectiveFrom: Timestamp


class PlanPricing(BaseModel):
    """What the install pays (a price belongs to the template; a move never changes it)."""

    inForce: Price
    version: Price | None = Field(description="the price the target version was published with")
    scheduled: list[ScheduledPrice]


class Missing(BaseModel):
    """Values the target version requires that the install lacks."""

    variables: list[str]
    secrets: list[str]


class AgentMoves(BaseModel):
    """Agents added, removed and renamed (same display name, new key)."""

    added: list[str]
    removed: list[str]
    renamed: list[dict[str, str]]


class UpgradePlan(BaseModel):
    """The plan of a move."""

    installId: str
    direction: Literal["upgrade", "rollback"]
    from_: InstallVersionRef = Field(alias="from")
    to: TargetVersionRef
    bump: Bump
    reasons: list[str]
    changeLogs: list[ChangeLogEntry]
    agents: AgentMoves
    diff: dict[str, Any] = Field(description="the structured definition diff (as the version diff route)")
    missing: Missing
    permissions: Permissions
    platform: PlatformPlan
    pricing: PlanPricing
    approvalRequired: bool
    approvalReason: str | None
    problems: list[str]
    ready: bool


class MoveReply(Reply):
    """POST .../upgrade or .../rollback: the plan (dryRun), the move made (`status` upgraded or
    rolled_back), or the request waiting for the org's approval (`status` pending_approval)."""

    dryRun: bool | None = None
    plan: UpgradePlan | None = None
    status: Literal["upgraded", "rolled_back", "pending_approval"] | None = None
    approvalId: str | None = None
    installId: str | None = None
    fromVersion: int | None = None
    toVersion: int | None = None
    semver: str | None = None
    bump: Bump | None = None
    deployedAgents: list[DeployedAgent] | None = None
    warnings: list[str] | None = None
    at: Timestamp | None = None


class AutoUpgradeReply(Reply):
    """PATCH /api/installs/:installId/auto-upgrade."""

    installId: str
    autoUpgrade: AutoMode
