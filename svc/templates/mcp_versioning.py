"""What a new version changes about MCP that a deployer must see: a server added or pointed
elsewhere, an agent given another server, or an agent's tool rules widened. Each is a MINOR
change at least (svc/templates/versioning.py): tools the deployer never consented to could run.

"Widened" is judged conservatively, rule by rule: a rule added that does more than deny, a rule
removed that did less than allow, a default that lets more through, report mode switched on,
or the MCP rules (or the whole policy) dropped. Reordering counts as removing and adding.
"""

from __future__ import annotations

import json
from typing import Any

RANK = {"deny": 0, "require_approval": 1, "judge": 2, "allow": 3}


def _servers(definition: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in definition.get("mcpServers") or []}


def _rules(policy: dict[str, Any] | None) -> list[tuple[int, str]]:
    mcp = (policy or {}).get("mcp") or {}
    return [(i, json.dumps(rule, sort_keys=True)) for i, rule in enumerate(mcp.get("rules") or [])]


def _default(policy: dict[str, Any] | None) -> int:
    if policy is None:
        return RANK["allow"]  # no policy: everything passes through
    mcp = policy.get("mcp") or {}
    return RANK[mcp.get("defaultAction") or policy.get("defaultAction") or "allow"]


def widened(before: dict[str, Any] | None, after: dict[str, Any] | None) -> bool:
    """Whether `after` may let through a tool call `before` would not have."""
    if before is None:
        return False  # no policy already let everything through
    if after is None or _default(after) > _default(before):
        return True
    if after.get("mode") == "report" and before.get("mode") != "report":
        return True
    old, new = set(_rules(before)), set(_rules(after))
    actions = {text: json.loads(text)["action"] for _, text in old | new}
    added = [text for _, text in new - old]
    removed = [text for _, text in old - new]
    return any(RANK[actions[t]] > 0 for t in added) or any(RANK[actions[t]] < 3 for t in removed)


def mcp_bump_reasons(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The MINOR reasons of a new version's MCP changes (empty when it changes none of them)."""
    before, after = _servers(old), _servers(new)
    reasons = [f"MCP server {n!r} added" for n in sorted(set(after) - set(before))]
    reasons += [
        f"MCP server {n!r} reaches another server"
        for n in sorted(set(after) & set(before))
        if after[n] != before[n]
    ]
    old_agents = {a["key"]: a for a in old.get("agents") or []}
    for agent in new.get("agents") or []:
        previous = old_agents.get(agent["key"])
        if previous is None:
            continue  # a new agent is a MINOR change of its own
        gained = set(agent.get("mcpServers") or []) - set(previous.get("mcpServers") or [])
        reasons += [f"agent {agent['key']!r} may use MCP server {n!r}" for n in sorted(gained)]
        if agent.get("mcpServers") and widened(previous.get("accessPolicy"), agent.get("accessPolicy")):
            reasons.append(f"agent {agent['key']!r}: MCP tool rules widened")
    return reasons
