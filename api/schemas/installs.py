"""Responses of installs, platforms and the secret vault look-up (spec "Installs", "Platforms")."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, RootModel

from api.schemas.common import Reply, Timestamp


class CredentialField(BaseModel):
    """One credential a deployer supplies for a platform."""

    key: str
    label: str
    type: Literal["text", "password"]
    required: bool


class Capabilities(BaseModel):
    """What a platform can do (more flags may be listed)."""

    maxHierarchyDepth: int | None = Field(description="null: unlimited")
    supportedModels: list[str] | None = Field(description="null: no restriction")
    billingCompleteness: Literal["full", "none"]
    provisioningModel: str


class Platform(BaseModel):
    """A platform installs can target."""

    id: str
    label: str
    credentialFields: list[CredentialField]
    capabilities: Capabilities


class PlatformList(Reply):
    """GET /api/platforms (`svc` needs no credentials and is not listed)."""

    platforms: list[Platform]


class DeployedAgent(BaseModel):
    """An agent as provisioned upstream."""

    key: str
    externalId: str
    name: str


class InstallCreated(Reply):
    """POST /api/installs (201). `status` and `approvalId` appear when org governance holds it."""

    installId: str
    platform: str
    deployedAgents: list[DeployedAgent]
    platformData: dict[str, Any] = Field(description="dashboardUrl and agentUrls [{name, url}]")
    companyId: str | None = None
    warnings: list[str] | None = Field(default=None, description="omitted when empty")
    status: Literal["pending"] | None = None
    approvalId: str | None = None


class InstallItem(BaseModel):
    """One install as listed."""

    id: str
    templateId: str
    templateName: str
    templateSlug: str
    templateVersion: int
    platform: str
    companyId: str | None
    orchABaseUrl: str | None
    status: str = Field(description="pending, completed, cancelled, ...")
    createdAt: Timestamp


class InstallList(Reply):
    """GET /api/installs: newest first."""

    installs: list[InstallItem]


class UpdateNote(BaseModel):
    """A newer published version of the install's template (docs/upgrades.md)."""

    version: int
    semver: str | None
    bump: Literal["MAJOR", "MINOR", "PATCH"]
    widensPermissions: bool


class ManagedInstall(BaseModel):
    """A managed (`svc`) install summary; non-empty missing lists mean it is not fully configured."""

    id: str
    name: str = Field(description="the org name, or the template name without an org")
    pipelineName: str
    orgSlug: str | None
    status: str
    platform: str
    lastRunAt: Timestamp | None
    nextRunAt: Timestamp | None
    webhookToken: str | None
    requiredVariables: list[str]
    currentVariables: dict[str, str]
    missingSecrets: list[str]
    missingVariables: list[str]
    templateVersion: int
    updateAvailable: UpdateNote | None = Field(
        description="the newest version this install can move to, with its class for this install"
    )


class ManagedInstallList(RootModel[list[ManagedInstall]]):
    """GET /api/installs/mine: a JSON array."""


class WhoAmI(Reply):
    """GET /api/installs/whoami."""

    installId: str


class KeysUpdated(Reply):
    """PATCH variables or secrets: the names written."""

    ok: bool
    installId: str
    updatedKeys: list[str]


class CredentialsUpdated(Reply):
    """PATCH /api/installs/:installId/credentials: the credential names replaced (never values)."""

    ok: bool
    installId: str
    updatedKeys: list[str]


class InstallDeleted(Reply):
    """DELETE /api/installs/:installId: `warnings` lists partial upstream failures."""

    ok: bool
    installId: str
    platform: str
    deletedAgents: int
    warnings: list[str] | None = None


class InvokeReply(Reply):
    """POST /api/installs/:installId/invoke (orchC)."""

    ok: bool
    runId: str
    sessionId: str
    agentName: str
    text: str
    inputTokens: int
    outputTokens: int


class RunRecorded(Reply):
    """POST /api/installs/:installId/runs: the run id (a repeat of a runId answers the same)."""

    ok: bool
    runId: str


class KnownSecrets(Reply):
    """GET /api/secrets/known: the subset of the asked names the vault holds for the company."""

    known: list[str]


class CallbackSecret(Reply):
    """POST /api/installs/:id/callback-secret: the new signing secret, shown in this answer only."""

    installId: str
    callbackSecret: str
    rotatedAt: str
