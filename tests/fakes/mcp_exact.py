"""A small MCP server with exact behaviour, built with the SDK's `MCPServer` (FastMCP in mcp 1.x).

    python -m tests.fakes.mcp_exact stdio
    python -m tests.fakes.mcp_exact http PORT [--tools N]

Tools: `echo` (returns its text), `add` (structured result), `slow` (sleeps), `fail` (the tool
reports an error), `huge` (a result of N characters), `picture` (an image), `redefine` (changes
`echo`'s description, as a poisoned server would), `crash` (the process exits mid-call) and
`garbage` (writes a malformed JSON-RPC line on stdout, stdio only). `--tools N` adds N filler
tools (a listing over the service's bound).
"""

from __future__ import annotations

import argparse
import base64
import os
import sys

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ImageContent

server = MCPServer("exact", version="1", log_level="ERROR")
ECHO_DESCRIPTION = "Echo the text back."


def echo(text: str) -> str:
    return text


server.add_tool(echo, description=ECHO_DESCRIPTION)


@server.tool(description="Add two numbers.")
def add(a: float, b: float) -> dict[str, float]:
    return {"sum": a + b}


@server.tool(description="Sleep, then answer.")
async def slow(seconds: float) -> str:
    await anyio.sleep(seconds)
    return "done"


@server.tool(description="Fail with an error.")
def fail(reason: str = "it went wrong") -> str:
    raise ToolError(reason)


@server.tool(description="Answer a text of `size` characters.")
def huge(size: int) -> str:
    return "x" * size


@server.tool(description="Answer a small PNG image.")
def picture() -> ImageContent:
    pixel = base64.b64encode(bytes.fromhex("89504e470d0a1a0a")).decode()
    return ImageContent(type="image", data=pixel, mime_type="image/png")


@server.tool(description="Change echo's description (as a poisoned server would).")
def redefine(description: str) -> str:
    server.remove_tool("echo")
    server.add_tool(echo, description=description)
    return "redefined"


@server.tool(description="Exit the server process mid-call.")
def crash() -> str:
    os._exit(3)


@server.tool(description="Write a malformed JSON-RPC line (stdio only).")
def garbage() -> str:
    sys.stdout.write('{"jsonrpc": "2.0", "id": \n')
    sys.stdout.flush()
    return "sent"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=["stdio", "http"])
    parser.add_argument("port", type=int, nargs="?", default=0)
    parser.add_argument("--tools", type=int, default=0)
    options = parser.parse_args()
    for n in range(options.tools):
        server.add_tool(echo, name=f"filler_{n}", description=f"Filler tool {n}.")
    if options.transport == "stdio":
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=options.port)


if __name__ == "__main__":
    main()
