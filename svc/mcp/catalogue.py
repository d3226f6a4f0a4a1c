"""The operator's catalogue as the domain sees it: which names exist, who may use each, and how a
team's declared server becomes a `Target` to connect to (secrets filled in).

Secrets: `${NAME}` in a remote server's URL and header values, and in a catalogue server's
environment and header values, is replaced by the install's secret of that name, exactly as
`http_request` does for URLs and headers; an unknown name stays as written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from config.mcp_catalogue import McpCatalogueEntry
from svc.mcp.client import Target

SECRET_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def substitute(text: str, secrets: dict[str, str]) -> str:
    """`${NAME}` replaced by the secret's value (unknown names stay as written)."""
    return SECRET_REFERENCE.sub(lambda m: secrets.get(m.group(1), m.group(0)), text)


def secrets_named(text: str) -> list[str]:
    """The secret names a text refers to."""
    return SECRET_REFERENCE.findall(text)


class Unavailable(Exception):
    """A declared server cannot be used by this install (the message says why, with no secret)."""


@dataclass(frozen=True)
class Catalogue:
    """The operator's servers, by name."""

    entries: dict[str, McpCatalogueEntry]

    def names(self) -> list[str]:
        return sorted(self.entries)

    def allowed(self, name: str, template: dict[str, Any], owner: dict[str, Any] | None) -> bool:
        """Whether installs of this template (id, slug) and owner may use the server."""
        entry = self.entries.get(name)
        if entry is None:
            return False
        if entry.templates and not {template.get("id"), template.get("slug")} & set(entry.templates):
            return False
        if entry.orgs:
            return owner is not None and owner.get("kind") == "org" and owner.get("id") in entry.orgs
        return True

    def describe(self) -> list[dict[str, Any]]:
        """What builders may know of each server (GET /api/mcp/servers): no command, URL or env."""
        return [
            {
                "name": name,
                "description": entry.description,
                "transport": entry.transport,
                "restricted": bool(entry.templates or entry.orgs),
            }
            for name, entry in sorted(self.entries.items())
        ]

    def target(
        self,
        server: dict[str, Any],
        secrets: dict[str, str],
        allow_private: bool,
        template: dict[str, Any],
        owner: dict[str, Any] | None,
    ) -> Target:
        """How to reach a declared server for this install; Unavailable when it cannot be used."""
        timeout = float(server.get("timeoutSeconds") or 30.0)
        name = server["name"]
        if server.get("url"):
            headers = tuple((k, substitute(v, secrets)) for k, v in (server.get("headers") or {}).items())
            url = substitute(server["url"], secrets)
            return Target(
                name, "streamable-http", url, headers, timeout_s=timeout, allow_private=allow_private
            )
        wanted = server.get("catalogue") or ""
        entry = self.entries.get(wanted)
        if entry is None:
            raise Unavailable(f"no MCP server named {wanted!r} in this service's catalogue")
        if not self.allowed(wanted, template, owner):
            raise Unavailable(f"the catalogue server {wanted!r} is not offered to this template or org")
        timeout = (
            min(timeout, entry.timeout_seconds) if server.get("timeoutSeconds") else entry.timeout_seconds
        )
        if entry.command is not None:
            env = tuple((k, substitute(v, secrets)) for k, v in entry.env.items())
            return Target(name, "stdio", command=entry.command, args=entry.args, env=env, timeout_s=timeout)
        headers = tuple((k, substitute(v, secrets)) for k, v in entry.headers.items())
        # The operator's own URL may be internal: the private-address refusal does not apply to it.
        return Target(name, "streamable-http", entry.url, headers, timeout_s=timeout, allow_private=True)
