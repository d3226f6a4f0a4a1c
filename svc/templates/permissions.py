"""Which outbound requests two versions of an agent's access policy decide differently.

An upgrade that lets an agent reach more than before must be accepted by the deployer, and one
that lets it reach less is a MINOR change (docs/upgrades.md). Whether one first-match rule list
allows more than another is answered by probing: every request shape either policy singles out
(each rule's host, methods and path prefix, a subdomain for a `*.` host, and "any other" host,
method and path) is decided by both policies, as the runtime decides it, and each probe whose
decision moved is reported, grouped by host and path. Decisions rank deny < require_approval <
allow; no policy, and a policy in `report` mode, allow everything; an agent that does not exist
reaches nothing.

An agent's MCP reach joins the comparison (`mcp` of each change, svc/templates/mcp_versioning.py):
a server it may now use, a server it uses that now reaches another server, its tool rules
widened. Each is widened reach the deployer accepts like a wider HTTP policy.
"""

from __future__ import annotations

from itertools import product
from typing import Any

from svc.templates.mcp_versioning import agent_widenings

Policy = dict[str, Any] | None
RANK = {"deny": 0, "require_approval": 1, "allow": 2}
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
OTHER_HOST = "other-host.svc-probe.invalid"
OTHER_PATH = "/~svc-probe-other-path"
SUBDOMAIN = "svc-probe"
NOTHING: dict[str, Any] = {"accessPolicyVersion": "1", "defaultAction": "deny", "rules": []}


def _host_matches(pattern: str, host: str) -> bool:
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and len(host) > len(pattern) - 1
    return host == pattern


def decide(policy: Policy, host: str, method: str, path: str) -> str:
    """What the policy does with one request: allow, require_approval or deny (first match wins)."""
    if policy is None or policy.get("mode") == "report":
        return "allow"
    for rule in policy.get("rules") or []:
        match = rule.get("match") or {}
        if match.get("host") and not _host_matches(match["host"], host):
            continue
        if match.get("methods") and method not in match["methods"]:
            continue
        if match.get("pathPrefix") and not path.startswith(match["pathPrefix"]):
            continue
        return str(rule["action"])
    return str(policy.get("defaultAction") or "allow")


def _rules(*policies: Policy) -> list[dict[str, Any]]:
    return [rule.get("match") or {} for policy in policies if policy for rule in policy.get("rules") or []]


def _probes(old: Policy, new: Policy) -> tuple[list[tuple[str, str, str]], dict[str, str], list[str]]:
    """The probe requests, the label of each probe host, and the methods "other" stands for."""
    matches = _rules(old, new)
    labels = {OTHER_HOST: "any other host"}
    for match in matches:
        host = match.get("host")
        if host and host.startswith("*."):
            labels[f"{SUBDOMAIN}{host[1:]}"] = host
            labels.setdefault(host[2:], host[2:])
        elif host:
            labels[host] = host
    named = sorted({method for match in matches for method in match.get("methods") or []})
    unnamed = [method for method in METHODS if method not in named]
    methods = named + unnamed[:1]
    paths = sorted({match["pathPrefix"] for match in matches if match.get("pathPrefix")} | {"/", OTHER_PATH})
    return list(product(labels, methods, paths)), labels, unnamed


def policy_changes(old: Policy, new: Policy) -> dict[str, list[dict[str, Any]]]:
    """The requests `new` decides more permissively (`widened`) and less (`narrowed`) than `old`:
    [{host, methods, path, before, after}], grouped by host and the two decisions (`any path`
    when every path probed moved alike)."""
    probes, labels, unnamed = _probes(old, new)
    all_paths = {path for _, _, path in probes}
    cells: dict[tuple[str, str, str], dict[str, set[str]]] = {}
    for host, method, path in probes:
        before, after = decide(old, host, method, path), decide(new, host, method, path)
        if before != after:
            shown = unnamed if unnamed and method == unnamed[0] else [method]
            cells.setdefault((labels[host], before, after), {}).setdefault(path, set()).update(shown)
    result: dict[str, list[dict[str, Any]]] = {"widened": [], "narrowed": []}
    for (host, before, after), by_path in sorted(cells.items()):
        by_methods: dict[frozenset[str], list[str]] = {}
        for path, path_methods in by_path.items():
            by_methods.setdefault(frozenset(path_methods), []).append(path)
        for methods, paths in sorted(by_methods.items(), key=lambda item: sorted(item[1])):
            shown_paths = ["any path"] if set(paths) == all_paths else sorted(_path_label(p) for p in paths)
            for path in shown_paths:
                entry = {
                    "host": host,
                    "methods": [m for m in METHODS if m in methods],
                    "path": path,
                    "before": before,
                    "after": after,
                }
                result["widened" if RANK[after] > RANK[before] else "narrowed"].append(entry)
    return result


def _path_label(path: str) -> str:
    return "any other path" if path == OTHER_PATH else path


def permission_changes(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    """Per agent of either definition whose reach changes: {agent, change (added, removed,
    renamed, changed), renamedFrom?, widened, narrowed, mcp (what widens its MCP reach)}. A
    renamed agent (same display name, new key) is compared with its old self; an added one with
    an agent that reaches nothing."""
    before = {a["key"]: a for a in old.get("agents") or []}
    after = {a["key"]: a for a in new.get("agents") or []}
    gone = [key for key in before if key not in after]
    renamed: dict[str, str] = {}
    for key in [k for k in after if k not in before]:
        match = next((g for g in gone if before[g].get("name") == after[key].get("name")), None)
        if match is not None:
            renamed[key] = match
            gone.remove(match)
    changes: list[dict[str, Any]] = []
    for key, agent in after.items():
        source = key if key in before else renamed.get(key)
        old_policy = before[source].get("accessPolicy") if source else NOTHING
        diff = policy_changes(old_policy, agent.get("accessPolicy"))
        mcp = agent_widenings(old, new, before[source] if source else None, agent)
        kind = "changed" if key in before else "renamed" if source else "added"
        if diff["widened"] or diff["narrowed"] or mcp or kind == "added":
            entry = {"agent": key, "change": kind, **diff, "mcp": mcp}
            if kind == "renamed":
                entry["renamedFrom"] = source
            changes.append(entry)
    changes += [{"agent": key, "change": "removed", "widened": [], "narrowed": [], "mcp": []} for key in gone]
    return changes


def widened_agents(changes: list[dict[str, Any]]) -> list[str]:
    """The agents that may reach more than before, over HTTP or MCP (what the deployer accepts)."""
    return [change["agent"] for change in changes if change["widened"] or change["mcp"]]


def widens(changes: list[dict[str, Any]]) -> bool:
    """Whether any agent may reach more than before (what the deployer must accept)."""
    return bool(widened_agents(changes))


def narrows(changes: list[dict[str, Any]]) -> bool:
    """Whether any agent that stays may reach less than before (a MINOR change)."""
    return any(change["narrowed"] for change in changes if change["change"] != "removed")
