"""`svc doctor`'s rows for the operator's MCP catalogue: each server is started (or reached) and
asked for its tools, through the same SDK connection the runtime uses (svc/mcp/client.py)."""

from __future__ import annotations

import asyncio

from config.mcp_catalogue import McpCatalogueEntry
from config.settings import Settings
from svc.mcp import Connection, McpFailure, Target

OK, FAILED, NOT_CONFIGURED = "ok", "FAILED", "not configured"
SHOWN_TOOLS = 5


async def check_entry(name: str, entry: McpCatalogueEntry) -> tuple[str, str, str]:
    """(row name, status, detail) for one catalogue server: it starts and lists its tools."""
    if entry.command is not None:
        target = Target(name, "stdio", command=entry.command, args=entry.args, env=tuple(entry.env.items()))
    else:
        target = Target(name, "streamable-http", entry.url, tuple(entry.headers.items()), allow_private=True)
    connection = Connection(target)
    try:
        await connection.open()
        tools = await connection.list_tools()
    except McpFailure as failure:
        return f"mcp:{name}", FAILED, failure.message
    finally:
        await connection.close()
    names = ", ".join(tool.name for tool in tools[:SHOWN_TOOLS]) + (
        ", ..." if len(tools) > SHOWN_TOOLS else ""
    )
    return f"mcp:{name}", OK, f"{entry.transport}: {len(tools)} tools ({names})"


async def check_mcp(settings: Settings) -> list[tuple[str, str, str]]:
    """A row per catalogue server, or one saying there is no catalogue."""
    if not settings.mcp_servers:
        return [
            ("mcp", NOT_CONFIGURED, "SVC_MCP_SERVERS_FILE is not set: templates may name remote servers only")
        ]
    return list(await asyncio.gather(*(check_entry(n, e) for n, e in sorted(settings.mcp_servers.items()))))
