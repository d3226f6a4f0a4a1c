"""The names MCP tools are offered to the model under: `mcp__<server>__<tool>`, at most 64 characters.

Providers accept tool names of letters, digits, `_` and `-`, at most 64 characters. A server name
is at most 16 characters (svc/templates/mcp_fields.py), which leaves 41 for the tool. A tool whose
name has other characters (MCP allows `.` and `/`) or is longer is written with those replaced by
`_` and cut, followed by `_` and 8 hex digits of a hash of its real name, so two tools never share
a name. The toolbox keeps the map back to (server, tool); nothing parses the name.
"""

from __future__ import annotations

import hashlib
import re

PREFIX = "mcp__"
MAX_LENGTH = 64
UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def tool_name(server: str, tool: str) -> str:
    """The model's name for `tool` of `server`."""
    head = f"{PREFIX}{server}__"
    safe = UNSAFE.sub("_", tool)
    if safe == tool and len(head) + len(tool) <= MAX_LENGTH:
        return head + tool
    digest = hashlib.sha256(tool.encode()).hexdigest()[:8]
    room = MAX_LENGTH - len(head) - len(digest) - 1
    return f"{head}{safe[:room]}_{digest}"


def is_mcp_name(name: str) -> bool:
    """Whether a tool name the model used is an MCP tool's."""
    return name.startswith(PREFIX)
