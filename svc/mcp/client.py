"""Connections to MCP servers through the official `mcp` SDK (its `Client`, stdio and streamable
HTTP transports), pooled per process with a bound.

Each connection lives in a task of its own: the SDK's transports are anyio context managers that
must be left in the task that entered them, and a server that crashes or sends garbage ends that
task (its transport's task group fails), never the caller's. Every request a caller makes is
raced against that end and bounded in time, so a server that crashes, hangs or answers malformed
JSON-RPC fails that one operation with an `McpFailure` whose message the model can read.

The SDK is imported here lazily, when a connection opens: an install actor whose team uses no
MCP never loads it (about 0.4 s and 40 MB).

Pooling: an install's actor keeps at most POOL_SIZE connections open, keyed by who uses them
(the install, or a test chat) and everything that reaches the server (URL, headers and
environment with secrets filled in, the agent's HTTP rules), and closes one idle for
IDLE_SECONDS or the least recently used when the pool is full. A connection that failed is
dropped, so the next use opens a fresh one. Sessions of different installs are never shared.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

log = logging.getLogger(__name__)

MAX_TOOLS = 128
MAX_LISTING_BYTES = 1_000_000
MAX_PAGES = 16
CONNECT_TIMEOUT_S = 30.0
LIST_TIMEOUT_S = 15.0
POOL_SIZE = 16
IDLE_SECONDS = 300.0
REFUSED_CODE = -32077  # the JSON-RPC error the guarded transport answers a refused request with
T = TypeVar("T")


class McpFailure(Exception):
    """An MCP operation failed; `message` is safe to show the model and the log (no secrets)."""

    def __init__(self, message: str, kind: str = "error") -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind  # connect, timeout, crashed, protocol, refused, too_large, error


@dataclass(frozen=True)
class Target:
    """How to reach one server, secrets filled in: never logged, only digested."""

    name: str
    transport: str  # "stdio" or "streamable-http"
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 30.0
    allow_private: bool = False

    @property
    def digest(self) -> str:
        """Everything that reaches the server, hashed (a pool key part, safe to keep in memory)."""
        return hashlib.sha256(repr(self).encode()).hexdigest()


@dataclass(frozen=True)
class ToolInfo:
    """A tool as the server lists it, with the digest its definition is pinned by."""

    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any] | None
    digest: str


def tool_digest(name: str, description: str, input_schema: dict[str, Any]) -> str:
    """sha256 of the definition the model is shown (name, description, input schema), canonical JSON."""
    canonical = json.dumps(
        {"name": name, "description": description, "inputSchema": input_schema},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


Check = Callable[[str, str], Awaitable[None]]


@dataclass
class Connection:
    """One open MCP session, owned by its own task."""

    target: Target
    check: Check | None = None
    opened_at: float = field(default_factory=time.monotonic)
    last_used: float = field(default_factory=time.monotonic)
    _client: Any = None
    _ready: asyncio.Future[None] | None = None
    _closing: asyncio.Event = field(default_factory=asyncio.Event)
    _dead: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None
    _why: str | None = None

    @property
    def alive(self) -> bool:
        return self._client is not None and not self._dead.is_set()

    async def open(self) -> None:
        """Start the session; McpFailure when it cannot be opened within CONNECT_TIMEOUT_S."""
        self._ready = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._own(), name=f"mcp:{self.target.name}")
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), CONNECT_TIMEOUT_S)
        except TimeoutError:
            await self.close()
            raise McpFailure(
                f"MCP server {self.target.name!r} did not start within {CONNECT_TIMEOUT_S:.0f} s", "timeout"
            ) from None

    async def _own(self) -> None:
        target = self.target
        assert self._ready is not None
        try:
            from mcp import Client, StdioServerParameters, stdio_client
            from mcp.client.streamable_http import streamable_http_client
            from mcp_types import Implementation

            async with contextlib.AsyncExitStack() as stack:
                if target.transport == "stdio":
                    assert target.command is not None
                    params = StdioServerParameters(
                        command=target.command, args=list(target.args), env=dict(target.env)
                    )
                    transport: Any = stdio_client(params, errlog=sys.stderr)
                else:
                    from plugins.egress_mcp import guarded_mcp_client

                    http = guarded_mcp_client(target.allow_private, dict(target.headers), self.check)
                    await stack.enter_async_context(http)
                    transport = streamable_http_client(str(target.url), http_client=http)
                client = Client(
                    transport,
                    cache=None,
                    read_timeout_seconds=target.timeout_s,
                    client_info=Implementation(name="svc", version="1"),
                )
                self._client = await stack.enter_async_context(client)
                self._ready.set_result(None)
                await self._closing.wait()
        except asyncio.CancelledError:
            self._why = "the connection was closed"
        except BaseException as exc:  # the server crashed or spoke garbage: this connection ends
            self._why = describe(exc)
            log.warning("MCP server %r: connection ended (%s)", target.name, type(exc).__name__)
        finally:
            self._dead.set()
            if not self._ready.done():
                self._ready.set_exception(
                    McpFailure(f"MCP server {target.name!r} could not be reached: {self._why}", "connect")
                )
                self._ready.exception()  # retrieved here, so an abandoned open logs nothing

    async def close(self) -> None:
        """End the session (the server process with it, for stdio)."""
        self._closing.set()
        if self._task is not None and not self._task.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._task), 10.0)
            except TimeoutError:
                self._task.cancel()
        self._dead.set()

    async def _guarded(self, operation: Awaitable[T], timeout_s: float, what: str) -> T:
        """The operation, unless the connection ends first or the time runs out."""
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED
        from pydantic import ValidationError

        self.last_used = time.monotonic()
        work = asyncio.ensure_future(operation)
        ended = asyncio.ensure_future(self._dead.wait())
        try:
            # A little after the SDK's own read timeout, which ends the request cleanly.
            done, _ = await asyncio.wait(
                {work, ended}, timeout=timeout_s + 1.0, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            ended.cancel()
        name = self.target.name
        if work not in done:
            work.cancel()
            if ended in done:
                raise McpFailure(f"MCP server {name!r} stopped during {what}: {self._why}", "crashed")
            raise McpFailure(f"MCP server {name!r} did not answer {what} within {timeout_s:g} s", "timeout")
        try:
            return work.result()
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                self._why = "the server closed the connection"
                self._dead.set()
                self._closing.set()
                raise McpFailure(
                    f"MCP server {name!r} stopped during {what}: {self._why}", "crashed"
                ) from None
            if exc.code == REFUSED_CODE:
                raise McpFailure(exc.error.message, "refused") from None
            if "timed out" in exc.error.message:
                raise McpFailure(
                    f"MCP server {name!r} did not answer {what} within {timeout_s:g} s", "timeout"
                ) from None
            raise McpFailure(
                f"MCP server {name!r} answered {what} with an error: {exc.error.message}"
            ) from None
        except ValidationError:
            raise McpFailure(f"MCP server {name!r} sent a malformed answer to {what}", "protocol") from None

    async def list_tools(self) -> list[ToolInfo]:
        """Every tool the server lists (all pages), bounded in number and size."""
        tools: list[ToolInfo] = []
        size = 0
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await self._guarded(
                self._client.list_tools(cursor=cursor, cache_mode="refresh"), LIST_TIMEOUT_S, "tools/list"
            )
            for tool in page.tools:
                schema = dict(tool.input_schema or {})
                description = tool.description or ""
                size += len(tool.name) + len(description) + len(json.dumps(schema, default=str))
                annotations = tool.annotations.model_dump(exclude_none=True) if tool.annotations else None
                digest = tool_digest(tool.name, description, schema)
                tools.append(ToolInfo(tool.name, description, schema, annotations, digest))
            if len(tools) > MAX_TOOLS or size > MAX_LISTING_BYTES:
                raise McpFailure(
                    f"MCP server {self.target.name!r} lists more tools than the bound "
                    f"({MAX_TOOLS} tools, {MAX_LISTING_BYTES // 1000} kB)",
                    "too_large",
                )
            cursor = page.next_cursor
            if cursor is None:
                return tools
        raise McpFailure(
            f"MCP server {self.target.name!r} lists more than {MAX_PAGES} pages of tools", "too_large"
        )

    async def call(self, tool: str, arguments: dict[str, Any], timeout_s: float | None = None) -> Any:
        """Call a tool; its `CallToolResult`."""
        bound = timeout_s or self.target.timeout_s
        return await self._guarded(
            self._client.call_tool(tool, arguments, read_timeout_seconds=bound),
            bound,
            f"the call of {tool!r}",
        )


def describe(exc: BaseException) -> str:
    """What ended a connection, in words that carry no secret (types, not messages)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    error = getattr(exc, "error", None)
    if getattr(error, "code", None) == REFUSED_CODE:  # the guard's own words (never the host)
        return str(error.message)  # type: ignore[union-attr]
    names = {
        "ConnectError": "the connection was refused",
        "ConnectTimeout": "the connection timed out",
        "EgressDenied": "refused by the egress guard",
        "FileNotFoundError": "the command was not found",
        "PermissionError": "the command may not be run",
        "ClosedResourceError": "the server closed the connection",
        "BrokenResourceError": "the server closed the connection",
        "EndOfStream": "the server closed the connection",
    }
    kind = type(exc).__name__
    return names.get(kind, f"{kind}")


class Pool:
    """Open connections of one process, keyed by user and target, bounded and idle-closed."""

    def __init__(self, size: int = POOL_SIZE, idle_seconds: float = IDLE_SECONDS) -> None:
        self.size = size
        self.idle_seconds = idle_seconds
        self._open: dict[str, Connection] = {}
        self._opening: dict[str, asyncio.Future[Connection]] = {}

    async def get(self, key: str, target: Target, check: Check | None = None) -> Connection:
        """The open connection for this key, or a new one (one opener per key at a time)."""
        await self._sweep()
        found = self._open.get(key)
        if found is not None and found.alive:
            found.last_used = time.monotonic()
            return found
        if found is not None:
            self._open.pop(key, None)
        pending = self._opening.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[Connection] = asyncio.get_running_loop().create_future()
        self._opening[key] = future
        try:
            connection = Connection(target, check)
            await connection.open()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()
            raise
        finally:
            self._opening.pop(key, None)
        future.set_result(connection)
        self._open[key] = connection
        await self._trim()
        return connection

    async def drop(self, key: str) -> None:
        """Close and forget a connection that failed."""
        connection = self._open.pop(key, None)
        if connection is not None:
            await connection.close()

    async def _sweep(self) -> None:
        now = time.monotonic()
        stale = [k for k, c in self._open.items() if not c.alive or now - c.last_used > self.idle_seconds]
        for key in stale:
            await self.drop(key)

    async def _trim(self) -> None:
        while len(self._open) > self.size:
            oldest = min(self._open, key=lambda k: self._open[k].last_used)
            await self.drop(oldest)

    async def aclose(self) -> None:
        """Close every connection (the actor is leaving)."""
        for key in list(self._open):
            await self.drop(key)

    def __len__(self) -> int:
        return len(self._open)
