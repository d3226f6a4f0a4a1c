"""Team definitions: agents, access policies and gates, as pydantic models.

These models validate request bodies, shape responses and generate the published
JSON Schema (`/api/schema/team/v1.json`), so the three never disagree. Rules
that span fields (unique keys, declared variables, gate targets, reporting
lines) are checked by `check_definition`, which names the offending path.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from config.catalogue import AGENT_MODELS
from svc.core import BadRequest, DisplayName, DisplayText
from svc.templates.mcp_fields import (
    MAX_AGENT_SERVERS,
    MAX_TEAM_SERVERS,
    McpPolicy,
    McpServer,
    ServerName,
    check_mcp,
)

AgentModel = Literal[AGENT_MODELS]  # type: ignore[valid-type]
HttpMethod = Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
GateKind = Literal["target-review", "draft-approval", "approval"]

MAX_AGENTS = 100
MAX_RULES = 100
MAX_PROMPT = 100_000
NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
HOST_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOST_PATTERN = rf"^(\*\.)?{HOST_LABEL}(\.{HOST_LABEL})*$"
InputName = Annotated[str, Field(pattern=NAME_PATTERN, description="letters, digits and _")]
VARIABLE_REFERENCE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


class Strict(BaseModel):
    """Strict types; unknown fields are dropped."""

    model_config = ConfigDict(strict=True, extra="ignore")


class RuleMatch(Strict):
    """What a rule matches; an omitted part matches everything."""

    host: str | None = Field(
        default=None,
        max_length=253,
        pattern=HOST_PATTERN,
        description="hostname; a leading `*.` matches any subdomain (no other wildcard)",
    )
    methods: list[HttpMethod] | None = Field(default=None, max_length=7)
    pathPrefix: str | None = Field(default=None, max_length=2048, pattern=r"^/")

    @field_validator("host")
    @classmethod
    def _lowercase(cls, value: str | None) -> str | None:
        return value.lower() if value else value


class Rule(Strict):
    """One access rule; the first that matches decides."""

    match: RuleMatch = Field(default_factory=RuleMatch)
    action: Literal["allow", "deny", "require_approval"]
    reason: str | None = Field(default=None, max_length=500)
    resendAfterCrash: bool = Field(
        default=False,
        description="the target deduplicates by the `Idempotency-Key` header: a request of this rule "
        "that was in flight when the run's worker died is sent again with the same key (otherwise "
        "the run waits at an `outcome-unknown` gate)",
    )


class AccessPolicy(Strict):
    """Outbound-HTTP policy of an agent (enforced by the managed runtime)."""

    accessPolicyVersion: Literal["1"]
    defaultAction: Literal["allow", "deny"] = "allow"
    rules: list[Rule] = Field(default_factory=list, max_length=MAX_RULES)
    mode: Literal["enforce", "report"] = Field(
        default="enforce",
        description="report: every decision is computed and logged (reportOnly) but nothing is blocked; "
        "the egress guard is never in report mode",
    )
    mcp: McpPolicy | None = Field(default=None, description="rules for MCP tool calls (docs/mcp.md)")


class Agent(Strict):
    """One member of the team."""

    key: str = Field(pattern=KEY_PATTERN, description="unique within the team")
    name: DisplayName = Field(min_length=1, max_length=200)
    title: DisplayName = Field(default="", max_length=200)
    role: DisplayName = Field(default="", max_length=100)
    capabilities: str = Field(default="", max_length=5000)
    model: AgentModel
    prompt: str = Field(default="", max_length=MAX_PROMPT)
    adapterType: str | None = Field(default=None, max_length=50)
    reportsTo: str | None = Field(
        default=None, max_length=64, description="key of this agent's manager; none for the root"
    )
    accessPolicy: AccessPolicy | None = None
    mcpServers: list[ServerName] | None = Field(
        default=None,
        max_length=MAX_AGENT_SERVERS,
        description="names of the team's mcpServers this agent may use (docs/mcp.md)",
    )


class Gate(Strict):
    """A human gate: the pipeline pauses after step `after` until a person decides."""

    name: str = Field(pattern=KEY_PATTERN)
    after: str = Field(max_length=64, description="key of the agent whose step the gate follows")
    kind: GateKind = "approval"
    description: DisplayText | None = Field(default=None, max_length=1000)


class TeamDefinition(Strict):
    """A team: its agents, the inputs deployers supply, and its human gates."""

    model_config = ConfigDict(strict=True, extra="ignore", title="TeamDefinition")

    version: Literal["v1"] = "v1"
    description: DisplayText = Field(default="", max_length=5000)
    requiredVariables: list[InputName] = Field(
        default_factory=list, max_length=100, json_schema_extra={"uniqueItems": True}
    )
    requiredSecrets: list[InputName] = Field(
        default_factory=list, max_length=100, json_schema_extra={"uniqueItems": True}
    )
    agents: list[Agent] = Field(min_length=1, max_length=MAX_AGENTS)
    gates: list[Gate] = Field(default_factory=list, max_length=20)
    mcpServers: list[McpServer] | None = Field(
        default=None,
        max_length=MAX_TEAM_SERVERS,
        description="MCP servers the agents may use: remote by URL, or from the operator's catalogue",
    )

    @field_validator("requiredVariables", "requiredSecrets")
    @classmethod
    def _unique(cls, names: list[str]) -> list[str]:
        if len(set(names)) != len(names):
            raise ValueError("names must be unique")
        return names


def check_definition(definition: TeamDefinition, path: str = "definition") -> None:
    """The cross-field rules; 400 naming the path (`definition.agents[2].prompt`)."""
    keys: dict[str, int] = {}
    for index, agent in enumerate(definition.agents):
        if agent.key in keys:
            raise BadRequest(f"{path}.agents[{index}].key: duplicate agent key {agent.key!r}")
        keys[agent.key] = index
    declared = set(definition.requiredVariables)
    for index, agent in enumerate(definition.agents):
        for variable in VARIABLE_REFERENCE.findall(agent.prompt):
            if variable not in declared:
                raise BadRequest(
                    f"{path}.agents[{index}].prompt: agent {agent.key!r} uses {{{{{variable}}}}}, "
                    "which is not in requiredVariables"
                )
        if agent.reportsTo is not None and agent.reportsTo not in keys:
            raise BadRequest(f"{path}.agents[{index}].reportsTo: no agent has key {agent.reportsTo!r}")
    _check_reporting_lines(definition, keys, path)
    names: set[str] = set()
    for index, gate in enumerate(definition.gates):
        if gate.name in names:
            raise BadRequest(f"{path}.gates[{index}].name: duplicate gate name {gate.name!r}")
        names.add(gate.name)
        if gate.after not in keys:
            raise BadRequest(f"{path}.gates[{index}].after: no agent has key {gate.after!r}")
    check_mcp(definition, path)


def _check_reporting_lines(definition: TeamDefinition, keys: dict[str, int], path: str) -> None:
    manager = {agent.key: agent.reportsTo for agent in definition.agents}
    for agent in definition.agents:
        seen = {agent.key}
        current = manager[agent.key]
        while current is not None:
            if current in seen:
                raise BadRequest(f"{path}.agents[{keys[agent.key]}].reportsTo: reporting lines form a cycle")
            seen.add(current)
            current = manager[current]


def hierarchy_depth(definition: dict[str, Any]) -> int:
    """Levels below the root (0 for a flat team) of a checked definition."""
    manager = {agent["key"]: agent.get("reportsTo") for agent in definition["agents"]}
    depth = 0
    for key in manager:
        level, current = 0, manager[key]
        while current is not None:
            level, current = level + 1, manager[current]
        depth = max(depth, level)
    return depth


def json_schema() -> dict[str, Any]:
    """JSON Schema draft-07 of a team definition, generated from the models."""
    schema = TeamDefinition.model_json_schema(ref_template="#/definitions/{model}", mode="validation")
    definitions = schema.pop("$defs", {})
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$id": "/api/schema/team/v1.json",
        **schema,
        "definitions": definitions,
    }
