"""What a deployer sees and decides about an install's MCP servers (docs/mcp.md):

- `view`: each declared server (how it is reached, with `${SECRET}` as written, never filled in;
  the agents that use it; the secrets it needs and which are missing) and its tools as the
  server lists them now (name, description, input schema, annotations and the hint's suggested
  rule, the definition's digest), each `accepted`, `refused`, `new` or `changed` (quarantined);
- `decide`: accept or refuse tools, an acceptance bound to the digest the deployer was shown
  (409 when the server now lists another definition);
- the approvals of tool calls under `require_approval`, and deciding them.

Listing connects to the servers from this process with the install's secrets, through the same
egress guard and pool as runs. The routes that call these are in api/handlers/mcp.py.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from pydantic import Field

from svc.core import BadRequest, Conflict, Document, RequestBody
from svc.mcp import McpFailure, ToolInfo, Unavailable, approval_view, classify, secrets_named, suggested_rule
from svc.runtime.mcp_run import McpService

MAX_DECISIONS = 500


class McpToolDecision(RequestBody):
    """One tool accepted or refused."""

    server: str = Field(max_length=64)
    tool: str = Field(max_length=256)
    digest: str = Field(max_length=64, description="the definition's digest, as GET .../mcp showed it")
    decision: Literal["accept", "refuse"]


class McpConsentBody(RequestBody):
    """POST /api/installs/:id/mcp/consent."""

    decisions: list[McpToolDecision] = Field(min_length=1, max_length=MAX_DECISIONS)


class McpApprovalDecisionBody(RequestBody):
    """POST /api/installs/:id/mcp/approvals/:approvalId."""

    decision: Literal["approve", "reject"]


class McpApprovalQuery(RequestBody):
    """GET /api/installs/:id/mcp/approvals."""

    status: Literal["pending", "approved", "rejected", "used", "expired"] | None = None


def needed_secrets(server: dict[str, Any], service: McpService) -> list[str]:
    """The secret names a server's URL, headers or catalogue entry refer to."""
    texts = [server.get("url") or "", *(server.get("headers") or {}).values()]
    entry = service.catalogue.entries.get(server.get("catalogue") or "")
    if entry is not None:
        texts += [*entry.env.values(), *entry.headers.values(), entry.url or ""]
    return sorted({name for text in texts for name in secrets_named(text)})


class McpInstalls:
    """The deployer's side of an install's MCP servers."""

    def __init__(self, service: McpService) -> None:
        self.service = service

    async def _listings(
        self, install: Document, secrets: dict[str, str]
    ) -> dict[str, tuple[list[ToolInfo] | None, str | None]]:
        """Each declared server's tools now (or why they could not be listed)."""
        definition = install["definition"]
        run = self.service.for_install(install, "consent", secrets, definition)
        users = {
            s["name"]: next(
                (a for a in definition["agents"] if s["name"] in (a.get("mcpServers") or [])), None
            )
            for s in definition.get("mcpServers") or []
        }

        async def one(server: dict[str, Any]) -> tuple[list[ToolInfo] | None, str | None]:
            agent = users[server["name"]] or {"key": "-", "name": "-"}
            try:
                key, target, check = run.reach(server, agent)
                return await run.listing(key, target, check), None
            except (Unavailable, McpFailure) as exc:
                return None, str(exc)

        servers = definition.get("mcpServers") or []
        found = await asyncio.gather(*(one(server) for server in servers))
        await run.aclose()
        return {server["name"]: result for server, result in zip(servers, found, strict=True)}

    async def view(self, install: Document, secrets: dict[str, str]) -> dict[str, Any]:
        """The servers, their tools and the deployer's decisions (see the module docstring)."""
        definition = install["definition"]
        pins = await self.service.consent.pins(install["_id"])
        listings = await self._listings(install, secrets)
        servers = []
        for server in definition.get("mcpServers") or []:
            name = server["name"]
            tools, error = listings[name]
            needed = needed_secrets(server, self.service)
            servers.append(
                {
                    "name": name,
                    "url": server.get("url"),
                    "catalogue": server.get("catalogue"),
                    "catalogueKnown": None
                    if not server.get("catalogue")
                    else server["catalogue"] in self.service.catalogue.entries,
                    "agents": [a["key"] for a in definition["agents"] if name in (a.get("mcpServers") or [])],
                    "secrets": needed,
                    "missingSecrets": [n for n in needed if n not in secrets],
                    "error": error,
                    "tools": [
                        {
                            "name": tool.name,
                            "description": tool.description,
                            "inputSchema": tool.input_schema,
                            "annotations": tool.annotations,
                            "suggestedRule": suggested_rule(tool.annotations),
                            "digest": tool.digest,
                            "status": classify(pins.get((name, tool.name)), tool.digest),
                            "pinnedDigest": pins[(name, tool.name)].digest
                            if (name, tool.name) in pins
                            else None,
                        }
                        for tool in tools or []
                    ],
                }
            )
        pending = sum(1 for s in servers for t in s["tools"] if t["status"] in ("new", "changed"))
        return {"installId": install["_id"], "servers": servers, "pendingDecisions": pending}

    async def decide(
        self, install: Document, secrets: dict[str, str], body: McpConsentBody, by: str | None
    ) -> dict[str, Any]:
        """Record the decisions; an acceptance must name the definition the server lists now."""
        declared = {s["name"] for s in install["definition"].get("mcpServers") or []}
        for index, item in enumerate(body.decisions):
            if item.server not in declared:
                raise BadRequest(
                    f"decisions[{index}].server: the install declares no MCP server {item.server!r}"
                )
        listings = (
            await self._listings(install, secrets)
            if any(d.decision == "accept" for d in body.decisions)
            else {}
        )
        for index, item in enumerate(body.decisions):
            if item.decision == "accept":
                tools, error = listings[item.server]
                if tools is None:
                    raise Conflict(f"decisions[{index}]: the server cannot be listed now ({error})")
                current = next((t for t in tools if t.name == item.tool), None)
                if current is None:
                    raise Conflict(f"decisions[{index}]: the server no longer lists {item.tool!r}")
                if current.digest != item.digest:
                    raise Conflict(
                        f"decisions[{index}]: {item.tool!r} changed since it was shown; read it again"
                    )
        for item in body.decisions:
            status: Literal["accepted", "refused"] = "accepted" if item.decision == "accept" else "refused"
            await self.service.consent.decide(install["_id"], item.server, item.tool, item.digest, status, by)
        return {"ok": True, "installId": install["_id"], "decided": len(body.decisions)}

    async def approvals(self, install: Document, status: str | None) -> dict[str, Any]:
        """The install's approval requests, newest first."""
        return {"approvals": await self.service.approvals.of_install(install["_id"], status)}

    async def decide_approval(
        self, install: Document, approval_id: str, decision: Literal["approve", "reject"], by: str | None
    ) -> dict[str, Any]:
        """Approve or reject one request (bound to its call's digest)."""
        doc = await self.service.approvals.decide(install["_id"], approval_id, decision, by)
        return {"approval": approval_view(doc)}
