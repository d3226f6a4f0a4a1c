"""Responses of the run detail and the run's live stream (docs/runs.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from api.schemas.common import EventStream, Reply, Timestamp
from api.schemas.runtime import security_entry_model
from svc.runtime import RUN_SECURITY_FIELDS

RunStatus = Literal["queued", "starting", "running", "paused", "completed", "failed", "cancelled"]


class RunStep(BaseModel):
    """One agent's loop within the run, in the order the steps began."""

    agent: str
    model: str | None
    status: str
    iterations: int | None = Field(description="model calls; null when the platform does not say")
    inputTokens: int | None
    outputTokens: int | None
    durationMs: int | None
    startedAt: Timestamp | None
    endedAt: Timestamp | None
    error: str | None


class AgentTokens(BaseModel):
    """Token totals of one agent over the run."""

    agent: str
    inputTokens: int | None
    outputTokens: int | None


# An entry of the run's security log, oldest first: the install log's entry without the run's id.
if TYPE_CHECKING:
    RunSecurityEntry = BaseModel
else:
    RunSecurityEntry = security_entry_model(
        "RunSecurityEntry",
        "An outbound request the run made, with the access policy's decision (oldest first).",
        RUN_SECURITY_FIELDS,
    )


class RunCost(BaseModel):
    """What the run costs its deployer: the template's price model applied, and the fee split."""

    pricingModel: str
    priceUsdCents: int | None
    billedTokens: int
    amountCents: int
    envelopeFeePercent: int
    envelopeFeeCents: int
    builderAmountCents: int


class CallbackAttempt(BaseModel):
    """One delivery attempt of the webhook callback."""

    at: Timestamp | None
    status: int | None = Field(description="the receiver's HTTP status; null when it did not answer")
    latencyMs: int | None
    error: str | None


class CallbackDelivery(BaseModel):
    """The webhook callback's delivery record."""

    url: str | None = Field(description="null in the builder's view")
    status: str | None = Field(description="pending, delivered or failed")
    attempts: list[CallbackAttempt]
    nextAttemptAt: Timestamp | None
    createdAt: Timestamp | None


class RunDetailReply(Reply):
    """GET /api/installs/:installId/runs/:runId: what happened in the run."""

    runId: str
    installId: str
    templateId: str
    platform: str
    view: Literal["deployer", "builder"] = Field(
        description="builder: the template's builder, who sees no task, response or callback URL"
    )
    status: RunStatus
    source: str | None = Field(description="run, webhook, schedule, continue, retry, heartbeat, ingest, ...")
    retryOf: str | None
    agent: str | None
    errorMessage: str | None
    pausedAtGate: str | None
    createdAt: Timestamp | None
    startedAt: Timestamp | None
    endedAt: Timestamp | None
    durationMs: int | None
    inputTokens: int | None
    outputTokens: int | None
    platformRunId: str | None
    task: str | None
    response: str | None
    steps: list[RunStep]
    tokensByAgent: list[AgentTokens]
    security: list[RunSecurityEntry]
    cost: RunCost | None = Field(description="null until the run is recorded (settled)")
    callback: CallbackDelivery | None
    queuePosition: int | None = Field(
        default=None, description="only while queued: 1 + the deployment's runs queued before it"
    )


class RunEventBase(BaseModel):
    """Every event: its id in the stream (`seq`, also the SSE `id:`), its type and time."""

    seq: int
    at: Timestamp | None


class RunStartedEvent(RunEventBase):
    """The run began executing (`task` only in the deployer's view)."""

    type: Literal["run_started"]
    source: str | None = None
    agent: str | None = None
    task: str | None = None


class ResumedEvent(RunEventBase):
    """A paused pipeline was continued."""

    type: Literal["resumed"]
    fromStep: int | None = None
    bypassGates: bool | None = None


class StepStartedEvent(RunEventBase):
    """An agent's loop began."""

    type: Literal["step_started"]
    agent: str
    model: str | None = None
    startedAt: Timestamp | None = None


class ToolCallEvent(RunEventBase):
    """An `http_request` and the access policy's decision."""

    type: Literal["tool_call"]
    agent: str
    tool: str
    method: str
    url: str
    decision: Literal["ALLOW", "BLOCK", "JUDGE", "PASSTHROUGH"]
    decisionSource: str | None = None
    reason: str | None = None
    reportOnly: bool = False
    statusCode: int | None = None
    latencyMs: int | None = None
    # An MCP tool call (docs/mcp.md): method `MCP`, url `mcp://<server>/<tool>`, and these.
    kind: Literal["mcp"] | None = None
    server: str | None = None
    mcpTool: str | None = None
    arguments: Any = None
    verdict: str | None = None
    outcome: str | None = None
    approvalId: str | None = None


class StepFinishedEvent(RunEventBase):
    """An agent's loop ended, with its tokens."""

    type: Literal["step_finished"]
    agent: str
    model: str | None = None
    status: str
    iterations: int
    inputTokens: int
    outputTokens: int
    durationMs: int
    startedAt: Timestamp | None = None
    error: str | None = None


class EndEvent(RunEventBase):
    """The run came to rest: paused at a gate, completed or failed; the stream then ends."""

    type: Literal["paused", "completed", "failed"]
    status: str
    inputTokens: int | None = None
    outputTokens: int | None = None
    gate: str | None = None
    agent: str | None = None
    error: str | None = None
    response: str | None = Field(default=None, description="the final response (deployer's view only)")


class RunEventStream(EventStream):
    """`id: <seq>` and `data: <json event>` per event, oldest first; `: keep-alive` comments; the
    stream closes after `paused`, `completed` or `failed` (reconnect with `Last-Event-ID`)."""

    event: RunStartedEvent | ResumedEvent | StepStartedEvent | ToolCallEvent | StepFinishedEvent | EndEvent
