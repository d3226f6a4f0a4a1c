"""Responses of the managed runtime: runs, the webhook trigger, heartbeats, the security log."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from api.schemas.common import Reply, Timestamp


class RunOutcome(Reply):
    """POST /api/installs/:installId/run: answered when the team finished or paused at a gate
    (200), or at once with `{runId, status: "queued"}` when the body says `wait: false` (202)."""

    runId: str
    status: Literal["completed", "paused", "failed", "queued"]
    response: str | None = None
    agent: str | None = Field(default=None, description="the agent that wrote the response")
    inputTokens: int = 0
    outputTokens: int = 0
    errorMessage: str | None = None
    pausedAtGate: str | None = Field(default=None, description="the gate's name when paused")


class Queued(Reply):
    """POST /api/webhook/:token: the run is queued; the result goes to callbackUrl."""

    runId: str
    status: Literal["queued"]


class RetryQueued(Reply):
    """POST /api/installs/:installId/runs/:runId/retry: the new run is queued (202)."""

    runId: str
    status: Literal["queued"]
    retryOf: str = Field(description="the run this one retries")


class HeartbeatReply(Reply):
    """POST /api/runtime/webhook: the deployer-webhook answer shape."""

    runId: str
    agentId: str
    companyId: str | None
    agentName: str | None
    response: str | None


class RuntimeTestReply(Reply):
    """POST /api/runtime/webhook/test."""

    response: str | None


class SecurityRequest(BaseModel):
    """One outbound request of an agent, with the access policy's decision."""

    id: str
    agentKey: str
    agentName: str
    runId: str
    method: str
    url: str
    hostname: str
    path: str
    decision: Literal["ALLOW", "BLOCK", "JUDGE", "PASSTHROUGH"]
    decisionSource: Literal["rule", "default", "judge", "approval"] | None
    reason: str | None
    judgeReasoning: str | None
    judgeConfidence: float | None = Field(description="0 to 1 when judged")
    statusCode: int | None = Field(description="null when blocked")
    latencyMs: int
    createdAt: Timestamp
    # MCP tool calls (docs/mcp.md): method MCP, url mcp://<server>/<tool>, and the call's details.
    kind: Literal["mcp"] | None = None
    mcp: dict[str, Any] | None = Field(
        default=None, description="server, tool, arguments (masked), verdict, outcome, durationMs"
    )


class SecurityRequestList(Reply):
    """GET /api/installs/:id/security/requests: the last 200, newest first."""

    requests: list[SecurityRequest]


class ReadBackRule(BaseModel):
    """A rule in the read-back spelling."""

    hosts: list[str]
    action: Literal["ALLOW", "BLOCK", "JUDGE"]
    methods: list[str] | None = None
    pathPrefix: str | None = None
    reason: str | None = None


class ReadBackPolicy(BaseModel):
    """An access policy in the read-back spelling."""

    defaultAction: Literal["ALLOW", "BLOCK"]
    rules: list[ReadBackRule]


class AgentPolicy(BaseModel):
    """An agent and its policy (null: every request passes through)."""

    key: str
    name: str
    policy: ReadBackPolicy | None
    mcp: dict[str, Any] | None = Field(
        default=None, description="the MCP rules: defaultAction ALLOW/BLOCK and rules (docs/mcp.md)"
    )


class PolicyList(Reply):
    """GET /api/installs/:id/policies."""

    agents: list[AgentPolicy]
