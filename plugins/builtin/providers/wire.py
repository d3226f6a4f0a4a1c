"""Shared by the three wire formats: constants, parsing helpers, the stream state and the `Wire` protocol."""

from __future__ import annotations

import email.utils
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from config.catalogue import AGENT_MODELS, AUTHORING, UPSTREAM
from plugins.types import (
    ChatMessage,
    CompletionRequest,
    CompletionResponse,
    ToolCall,
)

log = logging.getLogger(__name__)

BACKOFF_BASE_S = 0.2
MAX_DELAY_S = 5.0
SNIPPET_CHARS = 200
ANTHROPIC_VERSION = "2023-06-01"


class Malformed(Exception):
    """The upstream answered 2xx with a body we cannot read; the message says what is wrong."""


# ---- shared helpers -------------------------------------------------------------------


def _redact(text: str, key: str) -> str:
    """The text with the API key blanked out."""
    return text.replace(key, "***") if key else text


def catalogue_models(provider: str) -> tuple[str, ...]:
    """Every catalogue id served by a provider (agent, authoring and upstream-mapped models)."""
    ids: list[str] = list(AGENT_MODELS)
    for spec in AUTHORING.values():
        ids += [spec.default, *(spec.accepted or ())]
    ids += list(UPSTREAM)
    return tuple(dict.fromkeys(i for i in ids if i.startswith(f"{provider}:")))


def _upstream_message(response: httpx.Response, key: str) -> str:
    """A short, single-line, key-free message from an upstream error body."""
    try:
        text = response.text
    except (UnicodeDecodeError, httpx.HTTPError):
        text = ""
    message: Any = None
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict):
            message = error.get("message")
        elif isinstance(error, str):
            message = error
        message = message or data.get("message") or data.get("detail")
    if not isinstance(message, str) or not message.strip():
        message = text or response.reason_phrase or "no detail"
    message = _redact(" ".join(message.split()), key)
    return message[:SNIPPET_CHARS]


def _retry_after(response: httpx.Response) -> float | None:
    """The Retry-After header in seconds (delta or HTTP date), or None when absent or unreadable."""
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _backoff(attempt: int) -> float:
    """The delay before retry number `attempt + 1`: 0.2 s, 0.4 s, 0.8 s ... at most 5 s."""
    return min(BACKOFF_BASE_S * 2**attempt, MAX_DELAY_S)


def _arguments(raw: Any, where: str) -> dict[str, Any]:
    """Tool call arguments as a dict (from a dict or a JSON string); Malformed otherwise."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raise Malformed(f"{where} arguments are not valid JSON") from None
    if not isinstance(raw, dict):
        raise Malformed(f"{where} arguments are not a JSON object")
    return raw


def _obj(value: Any, where: str) -> dict[str, Any]:
    """The value if it is a JSON object; Malformed otherwise."""
    if not isinstance(value, dict):
        raise Malformed(f"{where} is not an object")
    return value


def _list(value: Any, where: str) -> list[Any]:
    """The value if it is a JSON array; Malformed otherwise."""
    if not isinstance(value, list):
        raise Malformed(f"{where} is not an array")
    return value


def _int(value: Any) -> int:
    """A token count (0 when absent or not a number)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _tool_names(messages: tuple[ChatMessage, ...]) -> dict[str, str]:
    """Tool call id -> tool name, over the assistant turns of a conversation."""
    return {call.id: call.name for m in messages for call in m.tool_calls}


@dataclass
class _ToolAcc:
    """A tool call being assembled from stream deltas."""

    id: str = ""
    name: str = ""
    json: str = ""
    args: dict[str, Any] | None = None

    def call(self, where: str) -> ToolCall:
        """The finished tool call."""
        args = self.args if self.args is not None else _arguments(self.json, where)
        return ToolCall(id=self.id, name=self.name, arguments=args)


@dataclass
class StreamState:
    """What a stream has delivered so far; `feed` returns the text of one event."""

    text: list[str] = field(default_factory=list)
    tools: dict[int, _ToolAcc] = field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    stop_reason: str | None = None
    finished: bool = False

    def response(self, where: str) -> CompletionResponse:
        """The whole answer."""
        calls = tuple(self.tools[i].call(f"{where} tool call {i}") for i in sorted(self.tools))
        return CompletionResponse(
            text="".join(self.text),
            tool_calls=calls,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            stop_reason=self.stop_reason,
        )


class Wire(Protocol):
    """One upstream wire format."""

    wire_format: str

    def url(self, request: CompletionRequest, stream: bool) -> str:
        """The endpoint."""
        ...

    def headers(self, request: CompletionRequest) -> dict[str, str]:
        """The auth (and version) headers."""
        ...

    def body(self, request: CompletionRequest, stream: bool) -> dict[str, Any]:
        """The JSON body."""
        ...

    def parse(self, data: Any, request: CompletionRequest) -> CompletionResponse:
        """A whole answer; Malformed when it cannot be read."""
        ...

    def feed(self, state: StreamState, event: str, data: Any, request: CompletionRequest) -> str:
        """Apply one stream event; the text it adds."""
        ...
