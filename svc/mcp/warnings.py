"""What an install answer's `warnings` says about the team's MCP servers (docs/mcp.md):

- on a platform that cannot run them (its driver's `runs_mcp` trait is false), which agents'
  MCP servers will not be available there;
- a catalogue name this service does not have, or has but does not offer to this template or org;
- on the managed runtime, that no tool is offered until the deployer consents to the tools.
"""

from __future__ import annotations

from typing import Any

from svc.mcp.catalogue import Catalogue


def install_warnings(
    definition: dict[str, Any],
    platform_id: str,
    runs_mcp: bool,
    catalogue: Catalogue,
    template: dict[str, Any],
    owner: dict[str, Any] | None,
    install_id: str,
) -> list[str]:
    """The warnings an install of this definition on this platform carries (none without MCP)."""
    servers = definition.get("mcpServers") or []
    users = [a["key"] for a in definition["agents"] if a.get("mcpServers")]
    if not servers or not users:
        return []
    if not runs_mcp:
        return [
            f"MCP servers are not available on {platform_id}: the MCP servers of agents "
            f"{', '.join(users)} will not be used there (docs/platforms/{platform_id}.md)"
        ]
    warnings = []
    for server in servers:
        name = server.get("catalogue")
        if name is None:
            continue
        if name not in catalogue.entries:
            known = ", ".join(catalogue.names()) or "none"
            warnings.append(
                f"MCP server {server['name']!r}: this service's catalogue has no server named {name!r} "
                f"(it has: {known}); its tools will not be available"
            )
        elif not catalogue.allowed(name, template, owner):
            warnings.append(
                f"MCP server {server['name']!r}: the catalogue server {name!r} is not offered to this "
                "template or org; its tools will not be available"
            )
    warnings.append(
        "MCP: no tool is offered to the agents until you consent to it: review the servers and tools "
        f"with GET /api/installs/{install_id}/mcp and accept them with POST .../mcp/consent"
    )
    return warnings
