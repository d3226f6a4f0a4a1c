"""The event streams of the authoring endpoints (spec "Streaming authoring endpoints (SSE)")."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from api.schemas.common import EventStream


class ChunkEvent(BaseModel):
    """A piece of the model's output, in order."""

    chunk: str


class ChatToolCallEvent(BaseModel):
    """A test chat's MCP tool call and its verdict (docs/mcp.md, "Authoring")."""

    toolCall: dict[str, Any]


class DoneEvent(BaseModel):
    """The last event: generate and assist (APPLY) carry `definition`, assist (DISCUSS) carries `text`."""

    done: Literal[True]
    definition: dict[str, Any] | None = Field(default=None, description="a team definition")
    text: str | None = None


class StreamErrorEvent(BaseModel):
    """A failure after the stream started (the status line was already 200); the stream then ends."""

    error: str


class AuthoringStream(EventStream):
    """`data: {chunk}` events, then `data: {done: true, ...}` (or `data: {error}`)."""

    event: ChunkEvent | ChatToolCallEvent | DoneEvent | StreamErrorEvent
