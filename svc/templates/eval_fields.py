"""A template's eval suite (`definition.evals`, docs/evals.md): cases, checks and thresholds.

The suite is a field of the team definition, so it is versioned, snapshotted, exported, imported
and diffed with the team it tests. It is validated here (every error names its JSON path); it is
run and scored by svc/evals. `suite_changes` says how a new version weakens its suite (the
version diff flags it).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, Field, model_validator

from config.catalogue import AGENT_MODELS
from svc.core import BadRequest

# The most cases one suite may hold: a bigger suite is refused when it is saved (400), so a run
# never starts one (docs/evals.md).
MAX_CASES = 50
MAX_CHECKS = 20
CheckKind = Literal[
    "contains",
    "notContains",
    "regex",
    "jsonSchema",
    "judge",
    "agentsUsed",
    "maxModelCalls",
    "maxTokens",
    "maxCostCents",
    "maxDurationMs",
    "denied",
    "notRequested",
    "gateReached",
]
# What each kind needs, besides `kind`.
NEEDS: dict[str, tuple[str, ...]] = {
    "contains": ("text",),
    "notContains": ("text",),
    "regex": ("pattern",),
    "jsonSchema": ("jsonSchema",),
    "judge": ("rubric",),
    "agentsUsed": ("agents",),
    "maxModelCalls": ("max",),
    "maxTokens": ("max",),
    "maxCostCents": ("max",),
    "maxDurationMs": ("max",),
    "denied": ("host",),
    "notRequested": ("host",),
    "gateReached": ("gate",),
}
Short = Annotated[str, Field(max_length=64)]
Value = Annotated[str, Field(max_length=10_000)]


class Strict(BaseModel):
    """Strict types; unknown fields are dropped (as in svc/templates/definitions.py)."""

    model_config = ConfigDict(strict=True, extra="ignore")


class Check(Strict):
    """One check of a case's run: its answer, its behaviour, or its policy verdicts."""

    kind: CheckKind
    text: str | None = Field(default=None, min_length=1, max_length=10_000)
    caseSensitive: bool = False
    pattern: str | None = Field(default=None, min_length=1, max_length=2_000)
    jsonSchema: dict[str, Any] | None = Field(default=None, max_length=100)
    rubric: str | None = Field(default=None, min_length=1, max_length=5_000)
    passScore: float | None = Field(
        default=None, ge=0, le=10, description="the judge's score (0-10) that passes (default 7)"
    )
    model: Literal[AGENT_MODELS] | None = Field(  # type: ignore[valid-type]
        default=None, description="the judge's model (default SVC_JUDGE_MODEL)"
    )
    agents: list[Short] | None = Field(default=None, min_length=1, max_length=100)
    max: int | None = Field(default=None, ge=0, le=1_000_000_000)
    host: str | None = Field(default=None, min_length=1, max_length=253)
    method: str | None = Field(default=None, max_length=10)
    pathPrefix: str | None = Field(default=None, max_length=2048, pattern=r"^/")
    gate: str | None = Field(default=None, min_length=1, max_length=64)

    @model_validator(mode="after")
    def _complete(self) -> Check:
        for name in NEEDS[self.kind]:
            if getattr(self, name) is None:
                raise ValueError(f"{name}: required for a {self.kind} check")
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"pattern: not a regular expression ({exc})") from None
        if self.jsonSchema is not None:
            try:
                Draft202012Validator.check_schema(self.jsonSchema)
            except SchemaError as exc:
                raise ValueError(f"jsonSchema: not a JSON Schema ({exc.message})") from None
        return self


class Replay(Strict):
    """Answer the case from a recorded run's journal: no model call (docs/evals.md)."""

    runId: str = Field(min_length=1, max_length=64)


class Case(Strict):
    """One case: a task for the team, its variables, and what its run must show."""

    name: str = Field(min_length=1, max_length=200)
    task: str = Field(min_length=1, max_length=100_000)
    variables: dict[str, Value] = Field(default_factory=dict, max_length=100)
    checks: list[Check] = Field(min_length=1, max_length=MAX_CHECKS)
    mustPass: bool = Field(default=False, description="the suite fails when this case does not pass")
    replay: Replay | None = None


class EvalSuite(Strict):
    """The template's eval suite and its thresholds."""

    required: bool = Field(default=False, description="publishing runs the suite and needs it to pass")
    passRate: float = Field(default=1.0, ge=0, le=1, description="share of cases that must pass")
    cases: list[Case] = Field(min_length=1, max_length=MAX_CASES)

    @model_validator(mode="after")
    def _unique(self) -> EvalSuite:
        seen: set[str] = set()
        for index, case in enumerate(self.cases):
            if case.name in seen:
                raise ValueError(f"cases[{index}].name: duplicate case name {case.name!r}")
            seen.add(case.name)
        return self


def suite_changes(old: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any]:
    """How a new version changes its suite: `weakened` lists each way it tests less than before
    (removed, no longer required, a lower pass rate, cases or mustPass dropped, checks removed)."""
    weakened: list[str] = []
    if old and not new:
        weakened.append("the eval suite was removed")
    elif old and new:
        if old.get("required") and not new.get("required"):
            weakened.append("the suite is no longer required to publish")
        if float(new.get("passRate", 1.0)) < float(old.get("passRate", 1.0)):
            weakened.append(
                f"pass rate lowered from {old.get('passRate', 1.0)} to {new.get('passRate', 1.0)}"
            )
        before = {c["name"]: c for c in old.get("cases") or []}
        after = {c["name"]: c for c in new.get("cases") or []}
        for name in sorted(set(before) - set(after)):
            weakened.append(f"case {name!r} removed")
        for name in sorted(set(before) & set(after)):
            if before[name].get("mustPass") and not after[name].get("mustPass"):
                weakened.append(f"case {name!r} no longer mustPass")
            if len(after[name].get("checks") or []) < len(before[name].get("checks") or []):
                weakened.append(f"case {name!r} has fewer checks")
    return {
        "before": _shape(old),
        "after": _shape(new),
        "weakened": weakened,
    }


def _shape(suite: dict[str, Any] | None) -> dict[str, Any] | None:
    if not suite:
        return None
    return {
        "required": bool(suite.get("required")),
        "passRate": suite.get("passRate", 1.0),
        "cases": len(suite.get("cases") or []),
    }


def check_suite(definition: Any, path: str) -> None:
    """The suite's rules that span the definition: variables it declares, agents and gates it has."""
    suite = definition.evals
    if suite is None:
        return
    declared = set(definition.requiredVariables)
    agents = {agent.key for agent in definition.agents}
    gates = {gate.name for gate in definition.gates}
    for i, case in enumerate(suite.cases):
        at = f"{path}.evals.cases[{i}]"
        for name in case.variables:
            if name not in declared:
                raise BadRequest(f"{at}.variables.{name}: not in requiredVariables")
        for j, check in enumerate(case.checks):
            unknown = [a for a in check.agents or [] if a not in agents]
            if unknown:
                raise BadRequest(f"{at}.checks[{j}].agents: no agent has key {unknown[0]!r}")
            if check.gate is not None and check.gate not in gates:
                raise BadRequest(f"{at}.checks[{j}].gate: no gate is named {check.gate!r}")
