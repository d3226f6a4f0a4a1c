"""MCP servers in a team definition, and the access policy's MCP rules (docs/mcp.md).

A team declares its MCP servers once (`mcpServers`, each a remote server by URL over the
streamable HTTP transport, or a server of the operator's catalogue by name) and each agent
selects the ones it uses by name (`agents[].mcpServers`), so one server is consented to once
per install whichever agents use it. A template never names a command to run: a public template
that could start processes on the operator's machines would be remote code execution, so
`command`, `args`, `env` and `cwd` are refused with a message pointing at the catalogue.

The policy's MCP rules (`accessPolicy.mcp`) have the HTTP rules' semantics: the first matching
rule decides, else the default; `mode: report` logs and lets through. They are compiled and
evaluated by svc/runtime/mcp_policy.py; `check_mcp` holds the rules that span fields.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from svc.core import BadRequest, DisplayText

MAX_TEAM_SERVERS = 20
MAX_AGENT_SERVERS = 10
MAX_MCP_RULES = 100
MAX_ARGUMENT_CONDITIONS = 10
MAX_HEADERS = 20
# `mcp__<server>__<tool>` must fit the providers' 64-character tool names: 16 for the server
# leaves 41 for the tool (a longer tool name is shortened with a hash, svc/mcp/names.py).
SERVER_NAME = r"^[a-z0-9][a-z0-9-]{0,15}$"
CATALOGUE_NAME = r"^[a-z0-9][a-z0-9_.-]{0,63}$"
HEADER_NAME = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$"
# A glob over names: letters, digits and the characters MCP tool names use, plus `*`, `?`, `[]`.
NAME_GLOB = r"^[A-Za-z0-9_.*?/\[\]!-]{1,128}$"
SECRET_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# `$.a.b[0]`, `$['a b']`, or a bare top-level key `a`.
STEP_TEXT = r"\.([A-Za-z_][A-Za-z0-9_-]*)|\[(\d{1,4})\]|\['([^'\\]{1,100})'\]"
ARGUMENT_PATH = re.compile(rf"^(\$({STEP_TEXT})+|[A-Za-z_][A-Za-z0-9_-]*)$")
STEP = re.compile(STEP_TEXT)
PROCESS_KEYS = ("command", "args", "env", "cwd")
ServerName = Annotated[str, Field(max_length=16)]
TRANSPORT_HINT = {
    "stdio": "a template cannot start processes: name a server of the operator's catalogue "
    "(`catalogue`) instead",
    "sse": "the HTTP+SSE transport is deprecated; use `streamable-http`",
}


class Strict(BaseModel):
    """Strict types; unknown fields are dropped (as in svc/templates/definitions.py)."""

    model_config = ConfigDict(strict=True, extra="ignore")


def parse_argument_path(path: str) -> tuple[str | int, ...]:
    """`$.a.b[0]` as `("a", "b", 0)`; a bare key `a` as `("a",)`. ValueError when it does not parse."""
    if not ARGUMENT_PATH.match(path):
        raise ValueError(f"argument path {path!r} does not parse (write `$.key.sub[0]` or a bare key)")
    if not path.startswith("$"):
        return (path,)
    steps: list[str | int] = []
    for match in STEP.finditer(path, 1):
        key, index, quoted = match.groups()
        steps.append(int(index) if index is not None else (key if key is not None else quoted))
    return tuple(steps)


class McpServer(Strict):
    """One MCP server the team may use: a remote URL, or a name in the operator's catalogue."""

    name: str = Field(
        pattern=SERVER_NAME,
        description="unique in the team; lowercase letters, digits and `-`, at most 16 characters; "
        "tools are offered to the model as `mcp__<name>__<tool>`",
    )
    transport: Literal["streamable-http", "catalogue"] | None = Field(
        default=None,
        description="`streamable-http` for `url` (the default), `catalogue` for `catalogue` (the default)",
    )
    url: str | None = Field(
        default=None,
        max_length=2048,
        description="http(s) URL of a remote server (streamable HTTP); `${SECRET}` is filled in from "
        "the install's secrets",
    )
    headers: dict[str, Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=dict,
        max_length=MAX_HEADERS,
        description="sent with every request to `url`; `${SECRET}` in a value is filled in from the "
        "install's secrets (declare the name in requiredSecrets)",
    )
    catalogue: str | None = Field(
        default=None, pattern=CATALOGUE_NAME, description="name of a server in the operator's catalogue"
    )
    timeoutSeconds: float = Field(
        default=30.0, ge=1, le=300, description="a tool call not answered in this time fails"
    )
    description: DisplayText = Field(default="", max_length=500)

    @model_validator(mode="before")
    @classmethod
    def _no_process(cls, data: Any) -> Any:
        if isinstance(data, dict):
            named = [key for key in PROCESS_KEYS if key in data]
            if named:
                raise ValueError(
                    f"`{named[0]}`: a template cannot name a command to run; ask the operator to add "
                    "the server to the MCP catalogue (SVC_MCP_SERVERS_FILE) and name it with `catalogue`"
                )
            hint = TRANSPORT_HINT.get(str(data.get("transport")))
            if hint:
                raise ValueError(f"transport {data['transport']!r}: {hint}")
        return data

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is None:
            return url
        match = re.match(r"^(https?)://([^/?#]+)", url, re.IGNORECASE)
        if not match or "@" in match.group(2) or not url.isprintable():
            raise ValueError("must be an http:// or https:// URL with a host (and no user:password@)")
        return url

    @field_validator("headers")
    @classmethod
    def _headers(cls, headers: dict[str, str]) -> dict[str, str]:
        for name, value in headers.items():
            if not re.match(HEADER_NAME, name):
                raise ValueError(f"header name {name!r} is not a valid HTTP header name")
            if len(value) > 4096 or not value.isprintable():
                raise ValueError(f"header {name!r}: at most 4096 printable characters")
        return headers

    @model_validator(mode="after")
    def _one_way_to_reach(self) -> McpServer:
        if (self.url is None) == (self.catalogue is None):
            raise ValueError(
                "give exactly one of `url` (a remote server) or `catalogue` (an operator's server)"
            )
        expected = "streamable-http" if self.url is not None else "catalogue"
        if self.transport is not None and self.transport != expected:
            raise ValueError(f"transport {self.transport!r} does not fit; this server needs {expected!r}")
        if self.catalogue is not None and self.headers:
            raise ValueError("`headers` apply to `url` servers only (the catalogue sets its own)")
        return self


class ArgumentCondition(Strict):
    """One argument of the call: the value at `path` (as text; JSON for non-strings) matches `pattern`."""

    path: str = Field(max_length=200, description="`$.key.sub[0]` or a bare top-level key")
    pattern: str = Field(
        max_length=500, description="a glob (`*`, `?`, `[abc]`) the whole value must match; case-sensitive"
    )

    @field_validator("path")
    @classmethod
    def _parses(cls, path: str) -> str:
        parse_argument_path(path)
        return path


class McpRuleMatch(Strict):
    """What an MCP rule matches; an omitted part matches everything."""

    server: str | None = Field(default=None, pattern=NAME_GLOB, description="server name or glob")
    tool: str | None = Field(
        default=None, pattern=NAME_GLOB, description="tool name (as the server names it) or glob"
    )
    arguments: list[ArgumentCondition] = Field(
        default_factory=list,
        max_length=MAX_ARGUMENT_CONDITIONS,
        description="all must match; a missing argument does not match",
    )


class McpRule(Strict):
    """One MCP rule; the first that matches decides."""

    match: McpRuleMatch = Field(default_factory=McpRuleMatch)
    action: Literal["allow", "deny", "judge", "require_approval"] = Field(
        description="`judge`: the LLM security judge decides; `require_approval`: a person approves "
        "this exact call (unlike HTTP rules, where `require_approval` means the judge)"
    )
    reason: str | None = Field(default=None, max_length=500)


class McpPolicy(Strict):
    """The MCP part of an agent's access policy."""

    defaultAction: Literal["allow", "deny"] | None = Field(
        default=None, description="when no rule matches; unset: the policy's own defaultAction"
    )
    rules: list[McpRule] = Field(default_factory=list, max_length=MAX_MCP_RULES)


def check_mcp(definition: Any, path: str) -> None:
    """The MCP rules that span fields; BadRequest naming the path."""
    servers: dict[str, int] = {}
    for index, server in enumerate(definition.mcpServers or ()):
        where = f"{path}.mcpServers[{index}]"
        if server.name in servers:
            raise BadRequest(f"{where}.name: duplicate MCP server name {server.name!r}")
        servers[server.name] = index
        declared = set(definition.requiredSecrets)
        texts = [("url", server.url or ""), *((f"headers.{k}", v) for k, v in server.headers.items())]
        for field, text in texts:
            for secret in SECRET_REFERENCE.findall(text):
                if secret not in declared:
                    raise BadRequest(f"{where}.{field}: ${{{secret}}} is not in requiredSecrets")
    for index, agent in enumerate(definition.agents):
        seen: set[str] = set()
        for position, name in enumerate(agent.mcpServers or ()):
            where = f"{path}.agents[{index}].mcpServers[{position}]"
            if name not in servers:
                raise BadRequest(f"{where}: no MCP server named {name!r} in the team's mcpServers")
            if name in seen:
                raise BadRequest(f"{where}: {name!r} is listed twice")
            seen.add(name)
