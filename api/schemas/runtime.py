"""Responses of the managed runtime: runs, the webhook trigger, heartbeats, the security log."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal, get_type_hints

from pydantic import BaseModel, Field, create_model

from api.schemas.common import Reply, Timestamp
from svc.runtime import SECURITY_FIELDS, McpCallRecord


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


def security_entry_model(name: str, doc: str, shown: tuple[str, ...]) -> type[BaseModel]:
    """A response model of security-log entries: the entry's id, the fields `shown` as
    svc/runtime/security_log.py defines them (`McpCallRecord`: a field with a default may be
    missing from an entry, so it may be null), and its time. A new field needs no edit here."""
    types = get_type_hints(McpCallRecord)
    spec: dict[str, Any] = {"id": (str, ...)}
    for item in dataclasses.fields(McpCallRecord):
        if item.name not in shown:
            continue
        about = item.metadata.get("about")
        if item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING:
            spec[item.name] = (types[item.name], Field(description=about))
        else:
            spec[item.name] = (types[item.name] | None, Field(default=None, description=about))
    spec["createdAt"] = (Timestamp, ...)
    return create_model(name, __doc__=doc, **spec)


# Built from the one definition of an entry; mypy sees a plain model (a class made at run time is
# not a type to it).
if TYPE_CHECKING:
    SecurityRequest = BaseModel
else:
    SecurityRequest = security_entry_model(
        "SecurityRequest",
        "One outbound request of an agent (an HTTP request or an MCP tool call, docs/mcp.md), with the "
        "access policy's decision.",
        SECURITY_FIELDS,
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
