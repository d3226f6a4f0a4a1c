"""The operator's MCP catalogue: servers that run as local processes or at internal URLs, by name.

`SVC_MCP_SERVERS_FILE` names a JSON or TOML file (chosen by the `.toml` suffix) with one table,
`servers`, of name to entry (docs/mcp.md):

    [servers.time]
    command = "/opt/mcp/bin/mcp-server-time"     # a process spoken to over stdio
    args = ["--local-timezone", "UTC"]
    env = { TZ = "UTC" }
    description = "Current time and time-zone conversions"

    [servers.search]
    url = "http://search.internal:8000/mcp"      # or a server at an (internal) URL
    headers = { Authorization = "Bearer ${SEARCH_TOKEN}" }
    orgs = ["acme"]                               # only installs of these orgs (slug or id)
    templates = ["research-team"]                 # only these templates (slug or id)

Templates name catalogue servers, never commands: only the operator decides what runs on the
service's machines. The file is read once, at start-up; anything it cannot use stops start-up
with one line naming the file and the key, like the models file (config/catalogue.py).
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
KEYS = frozenset(
    {"command", "args", "env", "url", "headers", "description", "templates", "orgs", "timeoutSeconds"}
)
MAX_SERVERS = 100


class McpServersFileError(ValueError):
    """The MCP catalogue file cannot be used; the message names the file and the key."""


class McpCatalogueEntry(BaseModel):
    """One server of the catalogue: a command (stdio) or a URL (streamable HTTP)."""

    model_config = ConfigDict(frozen=True)

    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    description: str = ""
    # Who may use it: template slugs or ids, org slugs or ids; empty means everyone.
    templates: tuple[str, ...] = ()
    orgs: tuple[str, ...] = ()
    timeout_seconds: float = 30.0

    @property
    def transport(self) -> str:
        """`stdio` or `streamable-http`."""
        return "stdio" if self.command is not None else "streamable-http"


def load_mcp_servers_file(path: Path) -> dict[str, McpCatalogueEntry]:
    """The catalogue in the file; McpServersFileError naming the file and the key otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise McpServersFileError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    toml = path.suffix.lower() == ".toml"
    try:
        data: Any = tomllib.loads(text) if toml else json.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise McpServersFileError(f"{path}: not valid {'TOML' if toml else 'JSON'} ({exc})") from None
    if not isinstance(data, dict) or set(data) - {"servers"}:
        raise McpServersFileError(f"{path}: expected one table, `servers`, of server name to entry")
    servers = data.get("servers") or {}
    if not isinstance(servers, dict):
        raise McpServersFileError(f"{path}: key servers: expected a table of server name to entry")
    if len(servers) > MAX_SERVERS:
        raise McpServersFileError(f"{path}: key servers: at most {MAX_SERVERS} servers")
    return {name: _entry(path, name, raw) for name, raw in servers.items()}


def _entry(path: Path, name: str, raw: Any) -> McpCatalogueEntry:
    where = f"{path}: key servers.{name!r}"
    if not NAME.match(name):
        raise McpServersFileError(f"{where}: names are lowercase letters, digits, `_`, `.` and `-`")
    if not isinstance(raw, dict):
        raise McpServersFileError(f"{where}: expected a table")
    unknown = sorted(set(raw) - KEYS)
    if unknown:
        raise McpServersFileError(f"{where}.{unknown[0]}: unknown key (accepted: {', '.join(sorted(KEYS))})")
    if ("command" in raw) == ("url" in raw):
        raise McpServersFileError(f"{where}: give exactly one of `command` (stdio) or `url`")
    values: dict[str, Any] = {}
    for key in ("command", "url", "description"):
        if key in raw:
            if not isinstance(raw[key], str) or (key != "description" and not raw[key].strip()):
                raise McpServersFileError(f"{where}.{key}: expected a non-empty string")
            values[key] = raw[key]
    if "url" in values and not re.match(r"^https?://[^/?#@]+", values["url"], re.IGNORECASE):
        raise McpServersFileError(f"{where}.url: expected an http:// or https:// URL with a host")
    for key in ("args", "templates", "orgs"):
        if key in raw:
            if not isinstance(raw[key], list) or not all(isinstance(v, str) for v in raw[key]):
                raise McpServersFileError(f"{where}.{key}: expected a list of strings")
            values[key] = tuple(raw[key])
    for key in ("env", "headers"):
        if key in raw:
            table = raw[key]
            if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
                raise McpServersFileError(f"{where}.{key}: expected a table of strings")
            values[key] = dict(table)
    if "headers" in values and "url" not in values:
        raise McpServersFileError(f"{where}.headers: only for a `url` server")
    if "env" in values and "command" not in values:
        raise McpServersFileError(f"{where}.env: only for a `command` server")
    if "timeoutSeconds" in raw:
        timeout = raw["timeoutSeconds"]
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 600:
            raise McpServersFileError(f"{where}.timeoutSeconds: expected a number of seconds, 0 to 600")
        values["timeout_seconds"] = float(timeout)
    return McpCatalogueEntry(**values)
