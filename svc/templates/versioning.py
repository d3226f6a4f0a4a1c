"""Semver-style classification of a new version, from the definition diff (spec "Versioning").

MAJOR: an agent key or an input (required variable or secret) removed or renamed,
a new required input, or a gate removed; MINOR: agents or gates added; PATCH:
anything else (prompts, models, policies, descriptions).
"""

from __future__ import annotations

from typing import Any, Literal

Bump = Literal["MAJOR", "MINOR", "PATCH"]
FIRST_SEMVER = "1.0.0"


def _keys(definition: dict[str, Any], field: str, key: str | None = None) -> set[str]:
    items = definition.get(field) or []
    return {item[key] if key else item for item in items}


def classify(old: dict[str, Any], new: dict[str, Any]) -> Bump:
    """The bump that publishing `new` over `old` represents."""
    old_agents, new_agents = _keys(old, "agents", "key"), _keys(new, "agents", "key")
    old_inputs = _keys(old, "requiredVariables") | _keys(old, "requiredSecrets")
    new_inputs = _keys(new, "requiredVariables") | _keys(new, "requiredSecrets")
    old_gates, new_gates = _keys(old, "gates", "name"), _keys(new, "gates", "name")
    if old_agents - new_agents or old_inputs != new_inputs or old_gates - new_gates:
        return "MAJOR"
    if new_agents - old_agents or new_gates - old_gates:
        return "MINOR"
    return "PATCH"


def next_semver(previous: str, bump: Bump) -> str:
    """`1.4.2` + MINOR = `1.5.0`."""
    major, minor, patch = (int(part) for part in previous.split("."))
    if bump == "MAJOR":
        return f"{major + 1}.0.0"
    if bump == "MINOR":
        return f"{major}.{minor + 1}.0"
    return f"{major}.{minor}.{patch + 1}"


def diff_summary(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """What changed between two definitions, computed (not asked of a model), with its bump."""
    old_agents = {a["key"]: a for a in old.get("agents") or []}
    new_agents = {a["key"]: a for a in new.get("agents") or []}
    removed = sorted(set(old_agents) - set(new_agents))
    added = sorted(set(new_agents) - set(old_agents))
    changed = sorted(k for k in set(old_agents) & set(new_agents) if old_agents[k] != new_agents[k])
    variables = (_keys(old, "requiredVariables"), _keys(new, "requiredVariables"))
    secrets = (_keys(old, "requiredSecrets"), _keys(new, "requiredSecrets"))
    breaking = [f"agent {key!r} removed or renamed" for key in removed]
    breaking += [f"required variable {n!r} removed or renamed" for n in sorted(variables[0] - variables[1])]
    breaking += [f"required secret {n!r} removed or renamed" for n in sorted(secrets[0] - secrets[1])]
    bump = classify(old, new)
    parts = [f"{len(added)} agent(s) added", f"{len(removed)} removed", f"{len(changed)} changed"]
    return {
        "bump": bump,
        "breaking": breaking,
        "addedAgents": added,
        "removedAgents": removed,
        "changedAgents": changed,
        "addedVariables": sorted(variables[1] - variables[0]),
        "removedVariables": sorted(variables[0] - variables[1]),
        "addedSecrets": sorted(secrets[1] - secrets[0]),
        "removedSecrets": sorted(secrets[0] - secrets[1]),
        "text": f"{bump}: " + ", ".join(parts) + (f"; breaking: {'; '.join(breaking)}" if breaking else ""),
    }
