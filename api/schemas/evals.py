"""Responses of the eval routes (docs/evals.md)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from api.schemas.common import Reply, Timestamp


class CheckResult(BaseModel):
    """One check's verdict (`passed` null: the check could not be made, an error)."""

    kind: str
    passed: bool | None
    reason: str
    policy: bool


class CaseResult(BaseModel):
    """One case: its verdict and reason, its run, what it spent."""

    name: str
    status: Literal["pass", "fail", "error"]
    reason: str
    mustPass: bool
    runId: str
    replayed: bool
    checks: list[CheckResult]
    tokens: int
    spentTokens: int
    judgeTokens: int
    modelCalls: int
    costCents: int
    durationMs: int | None
    policyChecks: int
    policyPassed: bool


class ScorecardTotals(BaseModel):
    """A suite run's totals."""

    cases: int
    passed: int
    failed: int
    errors: int
    tokens: int
    spentTokens: int
    costCents: int
    medianTokens: int
    medianCostCents: int
    policyCases: int
    policyPassed: int


class Scorecard(Reply):
    """A suite run of exactly one definition (`digest`): every case, the totals, the verdict."""

    id: str
    templateId: str
    recordId: str
    version: int
    digest: str
    trigger: Literal["manual", "publish"]
    status: Literal["passed", "failed", "error"]
    passed: bool
    passRate: float
    threshold: float
    failing: list[str]
    errors: list[str]
    mustPassMissed: list[str]
    totals: ScorecardTotals
    cases: list[CaseResult]
    createdAt: Timestamp


class ScorecardList(Reply):
    """GET /api/templates/:id/evals/scorecards: newest first, at most 50, without their cases."""

    scorecards: list[Scorecard]


class EvalRun(Reply):
    """One case's run (the builder's own): status, task, answer, tokens and its events."""

    runId: str
    status: str
    task: str | None
    response: str | None
    errorMessage: str | None
    pausedAtGate: str | None
    inputTokens: int
    outputTokens: int
    replayOnly: bool
    createdAt: Timestamp | None
    endedAt: Timestamp | None
    events: list[dict[str, Any]]
