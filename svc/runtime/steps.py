"""One agent invocation of a run (a step) and what a run produced, in the shapes the journal,
the watchers and the settlement keep: a step's journal entry, its events, a recorded model answer
read back, token totals per agent."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bson import ObjectId

from plugins.types import CompletionResponse, ToolCall
from svc.core import Conflict, Document, iso, utcnow
from svc.runtime.journal import cut


@dataclass
class AgentStep:
    """One agent invocation within a run."""

    agent_key: str
    path: str = ""
    status: str = "completed"
    input_tokens: int = 0
    output_tokens: int = 0
    error: str | None = None
    output: str | None = None
    started_at: datetime = field(default_factory=utcnow)
    ended_at: datetime | None = None
    model: str | None = None
    iterations: int = 0


@dataclass
class TeamResult:
    """What a run (or one execution of it) produced."""

    status: str
    response: str | None
    agent: str
    input_tokens: int
    output_tokens: int
    steps: list[AgentStep]
    error: str | None = None
    # A failed run whose tokens are billed all the same: it was stopped by its token cap (spend caps).
    billable: bool = False
    # The spend cap that refused a model call of the run (svc/billing/spend_caps.py), if one did.
    refusal: Conflict | None = None


def failed(message: str) -> TeamResult:
    """A run that ended failed before its team produced anything."""
    return TeamResult("failed", None, "", 0, 0, [], message)


def tokens_by_agent(journal: list[Document]) -> list[dict[str, Any]]:
    """Token totals per agent over the run's model calls, in the order the agents first ran."""
    totals: dict[str, dict[str, Any]] = {}
    for entry in journal:
        if entry.get("kind") == "model":
            row = totals.setdefault(
                entry["agent"], {"agent": entry["agent"], "inputTokens": 0, "outputTokens": 0}
            )
            row["inputTokens"] += int(entry.get("in") or 0)
            row["outputTokens"] += int(entry.get("out") or 0)
    return list(totals.values())


def answer_from(entry: dict[str, Any]) -> CompletionResponse:
    """A recorded model answer, as the provider gave it."""
    calls = tuple(
        ToolCall(id=str(c.get("id") or ""), name=str(c["name"]), arguments=dict(c.get("arguments") or {}))
        for c in entry.get("toolCalls") or []
    )
    return CompletionResponse(
        text=entry.get("text") or "",
        tool_calls=calls,
        input_tokens=int(entry.get("in") or 0),
        output_tokens=int(entry.get("out") or 0),
    )


def agent_entry(step: AgentStep) -> dict[str, Any]:
    """The journal's record of an invocation's end (the run's steps are made from these). Its
    `eventId` names the step's pipeline event: chosen once, so a settlement sent twice stores one,
    and time-ordered like every other event id, so events of one millisecond keep their order."""
    return {
        "kind": "agent",
        "key": step.path,
        "eventId": str(ObjectId()),
        "agent": step.agent_key,
        "model": step.model,
        "status": step.status,
        "output": cut(step.output),
        "error": step.error,
        "in": step.input_tokens,
        "out": step.output_tokens,
        "iterations": step.iterations,
        "startedAt": step.started_at,
        "endedAt": step.ended_at,
    }


def step_from(entry: dict[str, Any]) -> AgentStep:
    """An invocation that ended before, as the journal recorded it."""
    return AgentStep(
        agent_key=entry["agent"],
        path=entry["key"],
        status=entry.get("status") or "failed",
        input_tokens=int(entry.get("in") or 0),
        output_tokens=int(entry.get("out") or 0),
        error=entry.get("error"),
        output=entry.get("output"),
        started_at=entry.get("startedAt") or utcnow(),
        ended_at=entry.get("endedAt"),
        model=entry.get("model"),
        iterations=int(entry.get("iterations") or 0),
    )


def step_started(step: AgentStep) -> dict[str, Any]:
    """A step has begun: which agent, on which model."""
    return {"agent": step.agent_key, "model": step.model, "startedAt": iso(step.started_at)}


def step_finished(step: AgentStep) -> dict[str, Any]:
    """A step has ended: its outcome, model calls, tokens and duration."""
    ended = step.ended_at or utcnow()
    return {
        "agent": step.agent_key,
        "model": step.model,
        "status": step.status,
        "iterations": step.iterations,
        "inputTokens": step.input_tokens,
        "outputTokens": step.output_tokens,
        "durationMs": int((ended - step.started_at).total_seconds() * 1000),
        "startedAt": iso(step.started_at),
        "error": step.error,
    }
