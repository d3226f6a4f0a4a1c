"""Semver-style classification of a new version, from the definition diff (spec "Versioning").

MAJOR: an agent key or an input (required variable or secret) removed or renamed,
a new required input, or a gate removed; MINOR: agents or gates added; PATCH:
anything else (prompts, models, policies, descriptions).
"""

from __future__ import annotations

from typing import Any, Literal

from svc.templates.eval_fields import suite_changes
from svc.templates.mcp_versioning import mcp_bump_reasons
from svc.templates.permissions import permission_changes

Bump = Literal["MAJOR", "MINOR", "PATCH"]
FIRST_SEMVER = "1.0.0"


def _keys(definition: dict[str, Any], field: str, key: str | None = None) -> set[str]:
    items = definition.get(field) or []
    return {item[key] if key else item for item in items}


def bump_reasons(old: dict[str, Any], new: dict[str, Any]) -> tuple[Bump, list[str]]:
    """The bump that publishing `new` over `old` represents, and the rules that made it so."""
    old_agents, new_agents = _keys(old, "agents", "key"), _keys(new, "agents", "key")
    old_gates, new_gates = _keys(old, "gates", "name"), _keys(new, "gates", "name")
    major = [f"agent {k!r} removed or renamed" for k in sorted(old_agents - new_agents)]
    for field, label in (("requiredVariables", "variable"), ("requiredSecrets", "secret")):
        before, after = _keys(old, field), _keys(new, field)
        major += [f"required {label} {n!r} removed or renamed" for n in sorted(before - after)]
        major += [f"new required {label} {n!r}" for n in sorted(after - before)]
    major += [f"gate {g!r} removed" for g in sorted(old_gates - new_gates)]
    if major:
        return "MAJOR", major
    minor = [f"agent {k!r} added" for k in sorted(new_agents - old_agents)]
    minor += [f"gate {g!r} added" for g in sorted(new_gates - old_gates)]
    minor += mcp_bump_reasons(old, new)  # MCP (issue 32): servers added, tool rules widened
    if minor:
        return "MINOR", minor
    return "PATCH", ["no agent, input or gate added or removed (prompts, models, policies, descriptions)"]


def classify(old: dict[str, Any], new: dict[str, Any]) -> Bump:
    """The bump that publishing `new` over `old` represents."""
    return bump_reasons(old, new)[0]


def structured_diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A field-level diff of two definitions: agents added, removed, renamed (same display name,
    new key) and changed (each field before and after), policies and gates changed, inputs, and
    the bump with its reasons."""
    old_agents = {a["key"]: a for a in old.get("agents") or []}
    new_agents = {a["key"]: a for a in new.get("agents") or []}
    removed = sorted(set(old_agents) - set(new_agents))
    added = sorted(set(new_agents) - set(old_agents))
    renamed = []
    for key in list(removed):
        match = next((a for a in added if new_agents[a].get("name") == old_agents[key].get("name")), None)
        if match is not None:
            renamed.append({"from": key, "to": match})
            removed.remove(key)
            added.remove(match)
    changed, policies = [], []
    for key in sorted(set(old_agents) & set(new_agents)):
        before, after = old_agents[key], new_agents[key]
        fields = [
            {"field": f, "before": before.get(f), "after": after.get(f)}
            for f in sorted(set(before) | set(after))
            if before.get(f) != after.get(f)
        ]
        if fields:
            changed.append({"key": key, "fields": fields})
        if before.get("accessPolicy") != after.get("accessPolicy"):
            policies.append(
                {"agent": key, "before": before.get("accessPolicy"), "after": after.get("accessPolicy")}
            )
    old_gates = {g["name"]: g for g in old.get("gates") or []}
    new_gates = {g["name"]: g for g in new.get("gates") or []}
    bump, reasons = bump_reasons(old, new)
    return {
        "bump": bump,
        "reasons": reasons,
        "agents": {"added": added, "removed": removed, "renamed": renamed, "changed": changed},
        "policies": policies,
        "gates": {
            "added": sorted(set(new_gates) - set(old_gates)),
            "removed": sorted(set(old_gates) - set(new_gates)),
            "changed": [
                {"name": n, "before": old_gates[n], "after": new_gates[n]}
                for n in sorted(set(old_gates) & set(new_gates))
                if old_gates[n] != new_gates[n]
            ],
        },
        "variables": _set_diff(old, new, "requiredVariables"),
        "secrets": _set_diff(old, new, "requiredSecrets"),
        # Evals (issue 36): a version that removes or weakens its suite is flagged.
        "evals": suite_changes(old.get("evals"), new.get("evals")),
    }


def _set_diff(old: dict[str, Any], new: dict[str, Any], field: str) -> dict[str, list[str]]:
    before, after = _keys(old, field), _keys(new, field)
    return {"added": sorted(after - before), "removed": sorted(before - after)}


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


# ---- an install's move between versions (issue 34; docs/upgrades.md) ------------------------


def upgrade_bump(
    old: dict[str, Any], new: dict[str, Any], have_variables: set[str], have_secrets: set[str]
) -> tuple[Bump, list[str], list[dict[str, Any]]]:
    """The bump of moving one install from `old` to `new`, its reasons and the per-agent
    permission changes: the publish rules, except that a new required input the install already
    holds breaks nothing for it, and a changed reach of an agent is at least MINOR (narrower, or
    wider, which the deployer must accept besides)."""
    held = {"requiredVariables": have_variables, "requiredSecrets": have_secrets}
    adjusted = dict(new)
    for field, have in held.items():
        before = _keys(old, field)
        adjusted[field] = [n for n in new.get(field) or [] if n in before or n not in have]
    bump, reasons = bump_reasons(old, adjusted)
    changes = permission_changes(old, new)
    reach = [
        f"agent {c['agent']!r} may reach {'more' if c['widened'] or c['mcp'] else 'less'} than before"
        for c in changes
        if c["change"] != "removed" and (c["widened"] or c["mcp"] or c["narrowed"])
    ]
    if reach and bump == "PATCH":
        bump, reasons = "MINOR", reach
    elif reach:
        reasons = reasons + reach
    return bump, reasons, changes
