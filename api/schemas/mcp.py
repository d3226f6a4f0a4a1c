"""Responses of the MCP routes: the catalogue's names, an install's servers and tools with the
deployer's decisions, and approvals of tool calls (docs/mcp.md)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from api.schemas.common import Reply, Timestamp


class McpCatalogueServer(BaseModel):
    """A server of the operator's catalogue, as builders may know it (no command, URL or env)."""

    name: str
    description: str
    transport: Literal["stdio", "streamable-http"]
    restricted: bool = Field(description="offered to some templates or orgs only")


class McpCatalogueList(Reply):
    """GET /api/mcp/servers."""

    servers: list[McpCatalogueServer]


class McpTool(BaseModel):
    """A tool as its server lists it now, and the deployer's decision on it."""

    name: str
    description: str
    inputSchema: dict[str, Any]
    annotations: dict[str, Any] | None
    suggestedRule: Literal["allow", "require_approval"] | None = Field(
        description="what the tool's hints suggest; never applied"
    )
    digest: str = Field(description="sha256 of name, description and input schema")
    status: Literal["accepted", "refused", "new", "changed"]
    pinnedDigest: str | None


class McpServerView(BaseModel):
    """One declared server of an install."""

    name: str
    url: str | None = Field(description="as written (secrets as ${NAME})")
    catalogue: str | None
    catalogueKnown: bool | None
    agents: list[str]
    secrets: list[str]
    missingSecrets: list[str]
    error: str | None = Field(description="why the tools could not be listed now")
    tools: list[McpTool]


class McpInstallView(Reply):
    """GET /api/installs/:id/mcp."""

    installId: str
    servers: list[McpServerView]
    pendingDecisions: int = Field(description="tools new or changed since consent (quarantined)")


class McpConsentReply(Reply):
    """POST /api/installs/:id/mcp/consent."""

    ok: Literal[True]
    installId: str
    decided: int


class McpApproval(BaseModel):
    """A request to approve one exact tool call."""

    id: str
    status: Literal["pending", "approved", "rejected", "used", "expired"]
    runId: str
    agentKey: str
    server: str
    tool: str
    arguments: Any = Field(description="secrets masked, long values cut")
    description: str | None
    digest: str = Field(description="of the exact call: install, run, agent, server, tool, arguments, policy")
    policyVersion: str | None
    requestedAt: Timestamp | None
    expiresAt: Timestamp | None
    decidedAt: Timestamp | None
    decidedBy: str | None
    grantExpiresAt: Timestamp | None
    usedAt: Timestamp | None


class McpApprovalList(Reply):
    """GET /api/installs/:id/mcp/approvals."""

    approvals: list[McpApproval]


class McpApprovalReply(Reply):
    """POST /api/installs/:id/mcp/approvals/:approvalId."""

    approval: McpApproval
