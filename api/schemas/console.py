"""Responses of the pipeline operator console (spec "Pipeline operator console")."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from api.schemas.common import Day, Reply, Timestamp


class PipelineEvent(BaseModel):
    """One entry of the events feed."""

    id: str
    eventType: str = Field(description="gate_triggered, gate_approved, step_completed, ...")
    stepKey: str | None
    gateName: str | None
    actorId: str | None
    actorEmail: str | None
    meta: dict[str, Any]
    createdAt: Timestamp


class EventList(Reply):
    """GET /api/installs/:id/events: the last 100, newest first."""

    events: list[PipelineEvent]


class RunLogDay(BaseModel):
    """Step outcomes of one UTC day."""

    date: Day
    ok: int = Field(description="step_completed events")
    error: int = Field(description="step_failed events")


class RunLog(Reply):
    """GET /api/installs/:id/run-log: oldest first, days without steps included."""

    days: list[RunLogDay]


class AgentRun(BaseModel):
    """One agent step of a pipeline run."""

    id: str
    agentKey: str
    runId: str = Field(description="the pipeline run")
    status: str = Field(description="completed or failed")
    inputTokens: int
    outputTokens: int
    errorMessage: str | None
    createdAt: Timestamp


class AgentRunList(Reply):
    """GET /api/installs/:id/agent-runs: newest first."""

    runs: list[AgentRun]


class CancelRunReply(Reply):
    """POST /api/installs/:id/cancel-run."""

    ok: bool
    runId: str
    cancelledStep: str | None = Field(description="the step that was stopped; null before any started")


class Schedule(BaseModel):
    """The Schedule resource."""

    cronExpression: str
    label: str | None
    enabled: bool
    onBacklog: Literal["skip", "queue"]
    timezone: str
    bypassGates: bool
    lastRunAt: Timestamp | None
    nextRunAt: Timestamp | None = Field(description="null while disabled")
    catchupWindowSeconds: int = Field(default=0, description="fires missed while down run if this recent")
    jitterSeconds: int = Field(default=0, description="random delay added to each fire")
    pauseOnFailure: int = Field(default=0, description="failed runs in a row that pause it (0: never)")
    consecutiveFailures: int = 0
    pausedNote: str | None = None


class ScheduleView(Reply):
    """GET /api/installs/:id/schedule."""

    schedule: Schedule | None
    timezones: list[str] = Field(description="IANA names")


class ScheduleSaved(Reply):
    """PATCH /api/installs/:id/schedule: `schedule` is null after a delete."""

    ok: bool
    schedule: Schedule | None


class ScheduleToggled(Reply):
    """PATCH /api/installs/:id/schedule/toggle."""

    ok: bool
    enabled: bool


class ScheduleTriggered(Reply):
    """POST /api/installs/:id/schedule/trigger: a schedule run now (the backlog policy applies)."""

    ok: bool
    runId: str | None
    queued: bool
    skipped: bool
    reason: str | None


class DraftQueueRecord(BaseModel):
    """A draft waiting at the draft-approval gate."""

    id: int
    status: str
    subject: str
    body: str
    recipientEmail: str | None
    targetHandle: str | None


class TargetQueueRecord(BaseModel):
    """A target waiting at the target-review gate."""

    id: str
    githubHandle: str | None
    email: str | None
    priorityScore: int
    status: str
    categoryFit: Any = None
    bio: str | None = None


class GateQueue(Reply):
    """GET /api/installs/:id/gates/:name/queue: at most 500 records; `total` counts them all."""

    records: list[DraftQueueRecord | TargetQueueRecord]
    total: int


class Draft(BaseModel):
    """The Outreach draft resource."""

    id: int
    installId: str
    targetId: str | None
    status: Literal["pending_approval", "approved", "rejected", "sent", "archived"]
    subject: str
    body: str
    rejectionNote: str | None
    editedAt: Timestamp | None
    createdAt: Timestamp


class Target(BaseModel):
    """The Target resource."""

    id: str
    installId: str
    githubHandle: str | None
    email: str | None
    priorityScore: int
    status: Literal["approved", "pending"]


class DraftWithTarget(BaseModel):
    """A draft and the target it was written for (null when it has none)."""

    draft: Draft
    target: Target | None


class DraftList(Reply):
    """GET /api/installs/:id/drafts: newest first, archived ones hidden."""

    drafts: list[DraftWithTarget]


class DraftEdited(Reply):
    """PATCH /api/installs/:id/drafts/:draftId: the draft as stored."""

    ok: bool
    draft: Draft


class BulkReply(Reply):
    """POST /api/installs/:id/drafts/bulk."""

    ok: bool
    count: int = Field(description="drafts moved")
