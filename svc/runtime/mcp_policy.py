"""The access policy's MCP rules: decide what happens to one MCP tool call of an agent.

The same semantics as the HTTP rules of svc/runtime/policy.py, over (server, tool, arguments)
instead of (method, URL):

- No access policy at all: every call passes through (`passthrough`), as HTTP requests do.
- Rules (`accessPolicy.mcp.rules`) are tried top to bottom and the first whose given parts all
  match decides: `allow`, `deny`, `judge` (the LLM judge) or `require_approval` (a person
  approves this exact call; `approval` here). No match: `accessPolicy.mcp.defaultAction`, or
  the policy's own `defaultAction` when the MCP part leaves it unset (so a deny-by-default
  policy also denies tools nobody allowed).
- `mode: report` (the policy's) applies too: decisions are logged, never enforced.

Matching: `server` and `tool` are globs (`fnmatch`, case-sensitive) over the names the team and
the server use; each argument condition reads the value at its path (`$.a.b[0]` or a bare key)
and matches the whole value, as text (JSON for anything not a string), against its glob. A
missing value matches no condition, so a rule that allows `$.repo` = `acme/*` never allows a
call without `repo`. Python's glob matching has no catastrophic backtracking, so a long argument
the model wrote cannot stall the evaluation.

Listing and calling are checked separately (`listable` and `evaluate`): a tool is offered to the
model unless no call of it could ever be allowed (a matching unconditional `deny` before any
rule that could let it through, or the default `deny`), and every call is then decided on its
own arguments.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Literal

from svc.templates import AccessPolicy, parse_argument_path

McpAction = Literal["allow", "deny", "judge", "approval", "passthrough"]
RULE_ACTIONS: dict[str, McpAction] = {
    "allow": "allow",
    "deny": "deny",
    "judge": "judge",
    "require_approval": "approval",
}
MISSING = object()


@dataclass(frozen=True, slots=True)
class McpVerdict:
    """What to do with one tool call, and which part of the policy decided it."""

    action: McpAction
    source: Literal["rule", "default"] | None
    rule_index: int | None
    reason: str | None


PASSTHROUGH = McpVerdict("passthrough", None, None, "no access policy")


@dataclass(frozen=True, slots=True)
class Condition:
    steps: tuple[str | int, ...]
    pattern: str


@dataclass(frozen=True, slots=True)
class CompiledMcpRule:
    server: str | None
    tool: str | None
    conditions: tuple[Condition, ...]
    verdict: McpVerdict

    def names_match(self, server: str, tool: str) -> bool:
        return (self.server is None or fnmatchcase(server, self.server)) and (
            self.tool is None or fnmatchcase(tool, self.tool)
        )

    def arguments_match(self, arguments: dict[str, Any]) -> bool:
        for condition in self.conditions:
            value = value_at(arguments, condition.steps)
            if value is MISSING or not fnmatchcase(as_text(value), condition.pattern):
                return False
        return True


@dataclass(frozen=True)
class CompiledMcpPolicy:
    """An agent's MCP rules, ready for `evaluate`; `version` names the whole policy it came from."""

    rules: tuple[CompiledMcpRule, ...]
    default: McpVerdict
    report_only: bool
    version: str


def policy_version(policy: dict[str, Any] | None) -> str:
    """A digest of the agent's whole access policy: an approval granted under one version is not
    valid under another (svc/mcp/approvals.py)."""
    canonical = json.dumps(policy, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def compile_mcp_policy(policy: dict[str, Any] | None) -> CompiledMcpPolicy | None:
    """Validate and compile an agent's stored access policy's MCP part; None for no policy."""
    if policy is None:
        return None
    return _compile(json.dumps(policy, sort_keys=True))


@functools.lru_cache(maxsize=512)
def _compile(policy_json: str) -> CompiledMcpPolicy:
    raw = json.loads(policy_json)
    model = AccessPolicy.model_validate(raw)
    mcp = model.mcp
    rules = []
    for index, rule in enumerate(mcp.rules if mcp else ()):
        conditions = tuple(Condition(parse_argument_path(c.path), c.pattern) for c in rule.match.arguments)
        verdict = McpVerdict(RULE_ACTIONS[rule.action], "rule", index, rule.reason)
        rules.append(CompiledMcpRule(rule.match.server, rule.match.tool, conditions, verdict))
    default_action = (mcp.defaultAction if mcp else None) or model.defaultAction
    default = McpVerdict(default_action, "default", None, "no MCP rule matched")
    return CompiledMcpPolicy(tuple(rules), default, model.mode == "report", policy_version(raw))


def evaluate(
    compiled: CompiledMcpPolicy | None, server: str, tool: str, arguments: dict[str, Any]
) -> McpVerdict:
    """The verdict for one call of `tool` on `server` with these arguments."""
    if compiled is None:
        return PASSTHROUGH
    for rule in compiled.rules:
        if rule.names_match(server, tool) and rule.arguments_match(arguments):
            return rule.verdict
    return compiled.default


def listable(compiled: CompiledMcpPolicy | None, server: str, tool: str) -> bool:
    """Whether some call of this tool could be let through (or asked about), so it is offered.
    A policy in report mode enforces nothing, so it hides nothing."""
    if compiled is None or compiled.report_only:
        return True
    for rule in compiled.rules:
        if not rule.names_match(server, tool):
            continue
        if rule.verdict.action != "deny":
            return True  # with or without argument conditions, some call may get through
        if not rule.conditions:
            return False  # every call of the tool reaching this rule is denied
    return compiled.default.action != "deny"


def value_at(arguments: Any, steps: tuple[str | int, ...]) -> Any:
    """The value at a parsed path, or MISSING."""
    current = arguments
    for step in steps:
        if isinstance(step, int) and isinstance(current, list) and 0 <= step < len(current):
            current = current[step]
        elif isinstance(step, str) and isinstance(current, dict) and step in current:
            current = current[step]
        else:
            return MISSING
    return current


def as_text(value: Any) -> str:
    """A string as it is; anything else as compact JSON (`5`, `true`, `{"a":1}`)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def read_back_mcp(policy: dict[str, Any] | None) -> dict[str, Any] | None:
    """The MCP part of GET /api/installs/:id/policies: default (ALLOW/BLOCK) and the rules."""
    compiled = compile_mcp_policy(policy)
    if compiled is None:
        return None
    names = {"allow": "ALLOW", "deny": "BLOCK", "judge": "JUDGE", "approval": "APPROVAL"}
    mcp = (policy or {}).get("mcp") or {}
    return {
        "defaultAction": names[compiled.default.action],
        "rules": [{**rule, "action": names[RULE_ACTIONS[rule["action"]]]} for rule in mcp.get("rules", [])],
    }
