"""What the built-in drivers share when an install moves to another version: which agents
change, by key (a plain module of helpers; not registered as a plugin)."""

from __future__ import annotations

from typing import Any

from plugins.types import AgentChange, DeployedAgent


def agent_changes(current: dict[str, Any], target: dict[str, Any]) -> list[AgentChange]:
    """Per agent key: `update` (its fields differ), `create` (new key), `remove` (dropped key) or
    `keep`. A renamed agent (new key) is a create and a remove: upstream ids follow keys."""
    before = {agent["key"]: agent for agent in current.get("agents") or []}
    after = {agent["key"]: agent for agent in target.get("agents") or []}
    changes: list[AgentChange] = []
    for key, agent in after.items():
        old = before.get(key)
        if old is None:
            changes.append(AgentChange(key, "create", f"new agent {agent.get('name') or key}"))
            continue
        fields = sorted(f for f in set(old) | set(agent) if old.get(f) != agent.get(f))
        if fields:
            changes.append(AgentChange(key, "update", "changes " + ", ".join(fields)))
        else:
            changes.append(AgentChange(key, "keep"))
    changes += [AgentChange(key, "remove", "not in the new version") for key in before if key not in after]
    return changes


def by_key(agents: tuple[DeployedAgent, ...]) -> dict[str, DeployedAgent]:
    """Deployed agents by team key (a later entry for a key wins: an interrupted attempt's)."""
    return {agent.key: agent for agent in agents}
