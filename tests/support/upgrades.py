"""Shared helpers for the upgrade tests: a template with versions, installs of it, and the
version routes over HTTP (docs/upgrades.md).

A plain module (not a conftest): the test modules import what they use.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.support.accounts import bearer
from tests.support.templates import agent, definition, release

OPEN = None  # an agent without a policy reaches every host
LOCKED = {"accessPolicyVersion": "1", "defaultAction": "deny", "rules": []}


def policy(*hosts: str, default: str = "deny", methods: list[str] | None = None) -> dict[str, Any]:
    """A policy allowing these hosts (optionally only these methods), denying the rest."""
    match: dict[str, Any] = {}
    if methods:
        match["methods"] = methods
    return {
        "accessPolicyVersion": "1",
        "defaultAction": default,
        "rules": [{"match": {"host": host, **match}, "action": "allow"} for host in hosts],
    }


def team(prompt: str = "You lead.", **fields: Any) -> dict[str, Any]:
    """A one-agent team whose lead may reach api.example.com only."""
    lead = agent("lead", name="Lead", prompt=prompt, accessPolicy=policy("api.example.com"))
    return definition(lead, **fields)


def changed(base: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A deep copy of a definition with top-level fields replaced."""
    value = copy.deepcopy(base)
    value.update(fields)
    return value


def with_agents(base: dict[str, Any], *agents: dict[str, Any]) -> dict[str, Any]:
    """A deep copy with these agents instead."""
    return changed(base, agents=[copy.deepcopy(a) for a in agents])


async def publish_next(
    client: Any, key: str, template_id: str, new: dict[str, Any], log: str
) -> dict[str, Any]:
    """Publish a new version of the template with this definition and change log."""
    return await release(client, key, template_id, new, change_log=log)


async def versions(client: Any, headers: dict[str, str], install_id: str) -> dict[str, Any]:
    """GET /api/installs/:id/versions; asserts 200."""
    response = await client.get(f"/api/installs/{install_id}/versions", headers=headers)
    assert response.status == 200, await response.text()
    return dict(await response.json())


async def move(
    client: Any, headers: dict[str, str], install_id: str, direction: str = "upgrade", **body: Any
) -> Any:
    """POST /api/installs/:id/upgrade (or rollback); returns the response."""
    return await client.post(f"/api/installs/{install_id}/{direction}", json=body, headers=headers)


async def move_ok(
    client: Any, headers: dict[str, str], install_id: str, direction: str = "upgrade", **body: Any
) -> dict[str, Any]:
    """A move that must answer 200; its body."""
    response = await move(client, headers, install_id, direction, **body)
    assert response.status == 200, await response.text()
    return dict(await response.json())


async def plan_of(
    client: Any, headers: dict[str, str], install_id: str, direction: str = "upgrade", **body: Any
) -> dict[str, Any]:
    """The dry-run plan of a move."""
    answer = await move_ok(client, headers, install_id, direction, dryRun=True, **body)
    assert answer["dryRun"] is True
    return dict(answer["plan"])


def key_headers(key: str) -> dict[str, str]:
    """Bearer headers for a key."""
    return bearer(key)
