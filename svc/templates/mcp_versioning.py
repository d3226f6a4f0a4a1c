"""What a new version changes about MCP that a deployer must see: a server added or pointed
elsewhere, an agent given another server, or an agent's tool rules widened. Each is a MINOR
change at least (svc/templates/versioning.py): tools the deployer never consented to could run.
For an install's move, the same per agent (`agent_widenings`) is widened reach the deployer
accepts (svc/templates/permissions.py, docs/upgrades.md).

A server "reaches another server" when what it connects to or sends changes (its URL, catalogue
entry, transport or headers); its description or timeout changing does not count.

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


TARGET = ("url", "catalogue", "transport", "headers")


def _moved(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The servers of both definitions that now reach another server."""
    before, after = _servers(old), _servers(new)
    return sorted(
        name
        for name in set(after) & set(before)
        if any(after[name].get(key) != before[name].get(key) for key in TARGET)
    )


def _gained(before: dict[str, Any] | None, after: dict[str, Any]) -> list[str]:
    """The servers agent `after` may use that its old self `before` (None: none) could not."""
    had = set((before or {}).get("mcpServers") or [])
    return [name for name in after.get("mcpServers") or [] if name not in had]


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
    reasons += [f"MCP server {n!r} reaches another server" for n in _moved(old, new)]
    old_agents = {a["key"]: a for a in old.get("agents") or []}
    for agent in new.get("agents") or []:
        previous = old_agents.get(agent["key"])
        if previous is None:
            continue  # a new agent is a MINOR change of its own
        gained = sorted(_gained(previous, agent))
        reasons += [f"agent {agent['key']!r} may use MCP server {n!r}" for n in gained]
        if _rules_widened(previous, agent):
            reasons.append(f"agent {agent['key']!r}: MCP tool rules widened")
    return reasons


def agent_widenings(
    old: dict[str, Any], new: dict[str, Any], before: dict[str, Any] | None, after: dict[str, Any]
) -> list[str]:
    """What lets agent `after` (of `new`) call MCP tools its old self `before` (of `old`; None
    for an agent the move adds) could not: a server it may now use, a server it uses that now
    reaches another server, its tool rules widened."""
    gained = _gained(before, after)
    reasons = [f"may use MCP server {name!r}" for name in gained]
    moved = set(_moved(old, new)) - set(gained)
    uses = after.get("mcpServers") or []
    reasons += [f"MCP server {n!r} reaches another server" for n in uses if n in moved]
    if before is not None and _rules_widened(before, after):
        reasons.append("MCP tool rules widened")
    return reasons


def _rules_widened(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Whether an agent that uses MCP servers has tool rules letting more through than before."""
    return bool(after.get("mcpServers")) and widened(before.get("accessPolicy"), after.get("accessPolicy"))
