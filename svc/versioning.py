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
