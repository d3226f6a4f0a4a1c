"""MCP servers for tests: our exact server (tests/fakes/mcp_exact.py) over stdio or streamable
HTTP, and the real servers of scripts/mcp_servers.py; catalogue entries that name them."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from config.mcp_catalogue import McpCatalogueEntry
from scripts.mcp_servers import free_port, wait_for_port

REPO = Path(__file__).resolve().parents[2]


def exact_stdio(**fields: Any) -> McpCatalogueEntry:
    """A catalogue entry that runs the exact server over stdio."""
    return McpCatalogueEntry(
        command=sys.executable,
        args=("-m", "tests.fakes.mcp_exact", "stdio"),
        env={"PYTHONPATH": str(REPO)},
        **fields,
    )


@contextmanager
def exact_http(*extra: str) -> Iterator[str]:
    """The exact server over streamable HTTP on a free port; its MCP URL. Stopped by its PID."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.mcp_exact", "http", str(port), *extra],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, process, timeout_s=120.0)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def server(name: str, **fields: Any) -> dict[str, Any]:
    """A team's mcpServers entry."""
    return {"name": name, **fields}


def policy(
    *rules: dict[str, Any], default: str = "allow", mcp_default: str | None = None, **extra: Any
) -> dict[str, Any]:
    """An access policy with these MCP rules."""
    mcp: dict[str, Any] = {"rules": list(rules)}
    if mcp_default is not None:
        mcp["defaultAction"] = mcp_default
    return {"accessPolicyVersion": "1", "defaultAction": default, "mcp": mcp, **extra}


def rule(
    action: str, tool: str | None = None, server_name: str | None = None, **match: Any
) -> dict[str, Any]:
    """One MCP rule."""
    found: dict[str, Any] = dict(match)
    if tool is not None:
        found["tool"] = tool
    if server_name is not None:
        found["server"] = server_name
    return {"match": found, "action": action}
