"""The built-in LLM providers: three upstream wire formats over httpx (docs/providers.md).

- providerA speaks the Anthropic Messages API (`POST {base}/v1/messages`),
- providerB speaks OpenAI Chat Completions (`POST {base}/chat/completions`),
- providerC speaks Gemini generateContent (`POST {base}/v1beta/models/{model}:generateContent`).

The API key and base URL come in the request (the core reads them from settings).
429, 5xx and connection failures are retried with exponential backoff; the key never
appears in an error or a log line, even when the upstream echoes it back.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote

import httpx

from config.catalogue import AGENT_MODELS, AUTHORING, UPSTREAM
from plugins.egress import EgressDenied, egress_client
from plugins.hookspecs import hookimpl
from plugins.types import (
    ChatMessage,
    CompletionRequest,
    CompletionResponse,
    ProviderError,
    ProviderInfo,
    StreamChunk,
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


def _catalogue_models(provider: str) -> tuple[str, ...]:
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
            text="".join(self.text), tool_calls=calls, input_tokens=self.input_tokens,
            output_tokens=self.output_tokens, stop_reason=self.stop_reason,
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


# ---- providerA: Anthropic Messages ----------------------------------------------------


class AnthropicMessages:
    """The Anthropic Messages API."""

    wire_format = "anthropic-messages"

    def url(self, request: CompletionRequest, stream: bool) -> str:
        """POST {base}/v1/messages."""
        return f"{request.base_url.rstrip('/')}/v1/messages"

    def headers(self, request: CompletionRequest) -> dict[str, str]:
        """x-api-key and anthropic-version."""
        return {"x-api-key": request.api_key, "anthropic-version": ANTHROPIC_VERSION}

    def messages(self, messages: tuple[ChatMessage, ...]) -> list[dict[str, Any]]:
        """Neutral turns as Messages API turns; consecutive tool results share one user turn."""
        out: list[dict[str, Any]] = []
        for m in messages:
            if m.role == "tool":
                block = {"type": "tool_result", "tool_use_id": m.tool_call_id or "", "content": m.content}
                last = out[-1] if out else None
                if last and last["role"] == "user" and isinstance(last["content"], list) and all(
                    b.get("type") == "tool_result" for b in last["content"]
                ):
                    last["content"].append(block)
                else:
                    out.append({"role": "user", "content": [block]})
            elif m.role == "assistant" and m.tool_calls:
                blocks: list[dict[str, Any]] = [{"type": "text", "text": m.content}] if m.content else []
                blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                           for c in m.tool_calls]
                out.append({"role": "assistant", "content": blocks})
            else:
                out.append({"role": m.role, "content": m.content})
        return out

    def body(self, request: CompletionRequest, stream: bool) -> dict[str, Any]:
        """{model, system, max_tokens, messages, tools, temperature?, stream?}."""
        body: dict[str, Any] = {
            "model": request.upstream_model,
            "max_tokens": request.max_tokens,
            "messages": self.messages(request.messages),
        }
        if request.system:
            body["system"] = request.system
        if request.tools:
            body["tools"] = [{"name": t.name, "description": t.description, "input_schema": t.parameters}
                             for t in request.tools]
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if stream:
            body["stream"] = True
        return body

    def parse(self, data: Any, request: CompletionRequest) -> CompletionResponse:
        """Text blocks joined, tool_use blocks as tool calls, usage input/output tokens."""
        data = _obj(data, "the response")
        text: list[str] = []
        calls: list[ToolCall] = []
        for i, raw in enumerate(_list(data.get("content"), "content")):
            block = _obj(raw, f"content[{i}]")
            if block.get("type") == "text":
                text.append(str(block.get("text") or ""))
            elif block.get("type") == "tool_use":
                if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                    raise Malformed(f"content[{i}] tool_use has no id or name")
                calls.append(ToolCall(block["id"], block["name"], _arguments(block.get("input"), "tool_use")))
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        return CompletionResponse(
            text="".join(text), tool_calls=tuple(calls), input_tokens=_int(usage.get("input_tokens")),
            output_tokens=_int(usage.get("output_tokens")), stop_reason=data.get("stop_reason"),
        )

    def feed(self, state: StreamState, event: str, data: Any, request: CompletionRequest) -> str:
        """message_start, content_block_start/delta, message_delta, message_stop, error."""
        data = _obj(data, f"the {event} event")
        kind = data.get("type") or event
        if kind == "message_start":
            usage = _obj(data.get("message"), "message_start.message").get("usage") or {}
            state.input_tokens = _int(usage.get("input_tokens"))
            state.output_tokens = _int(usage.get("output_tokens"))
        elif kind == "content_block_start":
            block = _obj(data.get("content_block"), "content_block_start.content_block")
            if block.get("type") == "tool_use":
                state.tools[_int(data.get("index"))] = _ToolAcc(id=str(block.get("id") or ""),
                                                                name=str(block.get("name") or ""))
            elif block.get("type") == "text" and block.get("text"):
                state.text.append(str(block["text"]))
                return str(block["text"])
        elif kind == "content_block_delta":
            delta = _obj(data.get("delta"), "content_block_delta.delta")
            if delta.get("type") == "text_delta":
                piece = str(delta.get("text") or "")
                state.text.append(piece)
                return piece
            if delta.get("type") == "input_json_delta":
                acc = state.tools.get(_int(data.get("index")))
                if acc is None:
                    raise Malformed("input_json_delta for a block that is not a tool_use")
                acc.json += str(delta.get("partial_json") or "")
        elif kind == "message_delta":
            delta = data.get("delta") if isinstance(data.get("delta"), dict) else {}
            state.stop_reason = delta.get("stop_reason") or state.stop_reason
            usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
            if "output_tokens" in usage:
                state.output_tokens = _int(usage["output_tokens"])
            if usage.get("input_tokens"):
                state.input_tokens = _int(usage["input_tokens"])
        elif kind == "message_stop":
            state.finished = True
        elif kind == "error":
            error = data.get("error") if isinstance(data.get("error"), dict) else {}
            message = _redact(" ".join(str(error.get("message") or "stream error").split()), request.api_key)
            raise ProviderError(f"providerA stream failed: {message[:SNIPPET_CHARS]}", None,
                                retryable=error.get("type") in ("overloaded_error", "api_error"))
        return ""


# ---- providerB: OpenAI Chat Completions -----------------------------------------------


class OpenAIChat:
    """The OpenAI Chat Completions API (any OpenAI-compatible server)."""

    wire_format = "openai-chat"

    def url(self, request: CompletionRequest, stream: bool) -> str:
        """POST {base}/chat/completions (the base includes /v1)."""
        return f"{request.base_url.rstrip('/')}/chat/completions"

    def headers(self, request: CompletionRequest) -> dict[str, str]:
        """Authorization: Bearer <key>."""
        return {"Authorization": f"Bearer {request.api_key}"}

    def messages(self, request: CompletionRequest) -> list[dict[str, Any]]:
        """A system turn, then the neutral turns; tool results as role `tool` turns."""
        out: list[dict[str, Any]] = [{"role": "system", "content": request.system}] if request.system else []
        for m in request.messages:
            if m.role == "tool":
                out.append({"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.content})
            elif m.role == "assistant" and m.tool_calls:
                out.append({
                    "role": "assistant",
                    "content": m.content or None,
                    "tool_calls": [
                        {"id": c.id, "type": "function",
                         "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                        for c in m.tool_calls
                    ],
                })
            else:
                out.append({"role": m.role, "content": m.content})
        return out

    def body(self, request: CompletionRequest, stream: bool) -> dict[str, Any]:
        """{model, messages, tools, max_tokens, temperature?, stream?, stream_options?}."""
        body: dict[str, Any] = {
            "model": request.upstream_model,
            "messages": self.messages(request),
            "max_tokens": request.max_tokens,
        }
        if request.tools:
            body["tools"] = [
                {"type": "function",
                 "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
                for t in request.tools
            ]
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def parse(self, data: Any, request: CompletionRequest) -> CompletionResponse:
        """choices[0].message content and tool_calls; usage prompt/completion tokens."""
        data = _obj(data, "the response")
        choices = _list(data.get("choices"), "choices")
        if not choices:
            raise Malformed("choices is empty")
        choice = _obj(choices[0], "choices[0]")
        message = _obj(choice.get("message"), "choices[0].message")
        calls: list[ToolCall] = []
        for i, raw in enumerate(message.get("tool_calls") or []):
            call = _obj(raw, f"tool_calls[{i}]")
            function = _obj(call.get("function"), f"tool_calls[{i}].function")
            if not isinstance(call.get("id"), str) or not isinstance(function.get("name"), str):
                raise Malformed(f"tool_calls[{i}] has no id or function name")
            calls.append(ToolCall(call["id"], function["name"],
                                  _arguments(function.get("arguments"), f"tool_calls[{i}]")))
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        content = message.get("content")
        return CompletionResponse(
            text=content if isinstance(content, str) else "", tool_calls=tuple(calls),
            input_tokens=_int(usage.get("prompt_tokens")), output_tokens=_int(usage.get("completion_tokens")),
            stop_reason=choice.get("finish_reason"),
        )

    def feed(self, state: StreamState, event: str, data: Any, request: CompletionRequest) -> str:
        """One chat.completion.chunk: content and tool_call deltas, finish_reason, usage."""
        if data == "[DONE]":
            state.finished = True
            return ""
        data = _obj(data, "a stream chunk")
        if isinstance(data.get("error"), dict):
            message = _redact(" ".join(str(data["error"].get("message") or "").split()), request.api_key)
            raise ProviderError(f"providerB stream failed: {message[:SNIPPET_CHARS]}", None, retryable=True)
        usage = data.get("usage")
        if isinstance(usage, dict):
            state.input_tokens = _int(usage.get("prompt_tokens"))
            state.output_tokens = _int(usage.get("completion_tokens"))
        text = ""
        for raw in data.get("choices") or []:
            choice = _obj(raw, "a stream choice")
            if _int(choice.get("index")) != 0:
                continue
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
            if isinstance(delta.get("content"), str) and delta["content"]:
                text += delta["content"]
            for tool_raw in delta.get("tool_calls") or []:
                tool = _obj(tool_raw, "a tool_calls delta")
                acc = state.tools.setdefault(_int(tool.get("index")), _ToolAcc())
                acc.id = tool.get("id") or acc.id
                function = tool.get("function") if isinstance(tool.get("function"), dict) else {}
                acc.name = function.get("name") or acc.name
                acc.json += function.get("arguments") or ""
            if choice.get("finish_reason"):
                state.stop_reason = choice["finish_reason"]
                state.finished = True
        if text:
            state.text.append(text)
        return text


# ---- providerC: Gemini generateContent ------------------------------------------------


class GeminiGenerate:
    """The Gemini generateContent API; function calls get ids `call_<n>`."""

    wire_format = "gemini-generate"

    def url(self, request: CompletionRequest, stream: bool) -> str:
        """POST {base}/v1beta/models/{model}:generateContent (or :streamGenerateContent?alt=sse)."""
        model = quote(request.upstream_model, safe="-._~")
        action = "streamGenerateContent?alt=sse" if stream else "generateContent"
        return f"{request.base_url.rstrip('/')}/v1beta/models/{model}:{action}"

    def headers(self, request: CompletionRequest) -> dict[str, str]:
        """x-goog-api-key."""
        return {"x-goog-api-key": request.api_key}

    def contents(self, messages: tuple[ChatMessage, ...]) -> list[dict[str, Any]]:
        """Neutral turns as contents (user/model); consecutive tool results share one user turn."""
        names = _tool_names(messages)
        out: list[dict[str, Any]] = []
        for m in messages:
            if m.role == "tool":
                name = m.name or names.get(m.tool_call_id or "")
                if not name:
                    raise ProviderError(f"providerC needs the tool name of tool result {m.tool_call_id!r}")
                part = {"functionResponse": {"name": name, "response": {"content": m.content}}}
                last = out[-1] if out else None
                if last and last["role"] == "user" and all("functionResponse" in p for p in last["parts"]):
                    last["parts"].append(part)
                else:
                    out.append({"role": "user", "parts": [part]})
            elif m.role == "assistant":
                parts: list[dict[str, Any]] = [{"text": m.content}] if m.content or not m.tool_calls else []
                parts += [{"functionCall": {"name": c.name, "args": c.arguments}} for c in m.tool_calls]
                out.append({"role": "model", "parts": parts})
            else:
                out.append({"role": "user", "parts": [{"text": m.content}]})
        return out

    def body(self, request: CompletionRequest, stream: bool) -> dict[str, Any]:
        """{systemInstruction, contents, tools: [{functionDeclarations}], generationConfig}."""
        config: dict[str, Any] = {"maxOutputTokens": request.max_tokens}
        if request.temperature is not None:
            config["temperature"] = request.temperature
        body: dict[str, Any] = {"contents": self.contents(request.messages), "generationConfig": config}
        if request.system:
            body["systemInstruction"] = {"parts": [{"text": request.system}]}
        if request.tools:
            body["tools"] = [{"functionDeclarations": [
                {"name": t.name, "description": t.description, "parameters": t.parameters}
                for t in request.tools
            ]}]
        return body

    @staticmethod
    def first_call_number(request: CompletionRequest) -> int:
        """The n of the next `call_<n>` id: ids stay unique across the conversation."""
        return 1 + sum(len(m.tool_calls) for m in request.messages)

    def candidate(self, data: dict[str, Any], final: bool) -> dict[str, Any] | None:
        """The first candidate; a blocked prompt is an error, a chunk without one is None."""
        candidates = data.get("candidates")
        if not candidates:
            feedback = data.get("promptFeedback") if isinstance(data.get("promptFeedback"), dict) else {}
            if feedback.get("blockReason"):
                raise ProviderError(f"providerC blocked the prompt: {feedback['blockReason']}", None)
            if final:
                raise Malformed("candidates is missing or empty")
            return None
        return _obj(_list(candidates, "candidates")[0], "candidates[0]")

    def parts(self, candidate: dict[str, Any]) -> list[dict[str, Any]]:
        """The candidate's content parts (none when it has no content)."""
        content = candidate.get("content")
        if content is None:
            return []
        parts = _obj(content, "candidates[0].content").get("parts") or []
        return [_obj(p, "a content part") for p in _list(parts, "candidates[0].content.parts")]

    @staticmethod
    def usage(data: dict[str, Any]) -> tuple[int, int]:
        """Prompt tokens, and output tokens (candidates plus any thinking tokens)."""
        usage = data.get("usageMetadata") if isinstance(data.get("usageMetadata"), dict) else {}
        output = _int(usage.get("candidatesTokenCount")) + _int(usage.get("thoughtsTokenCount"))
        return _int(usage.get("promptTokenCount")), output

    def call(self, part: dict[str, Any], number: int) -> ToolCall:
        """A functionCall part as a tool call (the upstream id when it gives one)."""
        function = _obj(part["functionCall"], "functionCall")
        if not isinstance(function.get("name"), str):
            raise Malformed("functionCall has no name")
        upstream_id = function.get("id")
        call_id = upstream_id if isinstance(upstream_id, str) and upstream_id else f"call_{number}"
        return ToolCall(call_id, function["name"], _arguments(function.get("args"), "functionCall"))

    def parse(self, data: Any, request: CompletionRequest) -> CompletionResponse:
        """Text parts joined (thoughts skipped), functionCall parts as tool calls, usageMetadata."""
        data = _obj(data, "the response")
        candidate = self.candidate(data, final=True)
        assert candidate is not None
        text: list[str] = []
        calls: list[ToolCall] = []
        number = self.first_call_number(request)
        for part in self.parts(candidate):
            if "functionCall" in part:
                calls.append(self.call(part, number + len(calls)))
            elif isinstance(part.get("text"), str) and not part.get("thought"):
                text.append(part["text"])
        input_tokens, output_tokens = self.usage(data)
        return CompletionResponse(
            text="".join(text), tool_calls=tuple(calls), input_tokens=input_tokens,
            output_tokens=output_tokens, stop_reason=candidate.get("finishReason"),
        )

    def feed(self, state: StreamState, event: str, data: Any, request: CompletionRequest) -> str:
        """One GenerateContentResponse chunk; the stream ends when the connection closes."""
        data = _obj(data, "a stream chunk")
        if "usageMetadata" in data:
            state.input_tokens, state.output_tokens = self.usage(data)
        candidate = self.candidate(data, final=False)
        if candidate is None:
            return ""
        text = ""
        for part in self.parts(candidate):
            if "functionCall" in part:
                call = self.call(part, self.first_call_number(request) + len(state.tools))
                state.tools[len(state.tools)] = _ToolAcc(id=call.id, name=call.name, args=call.arguments)
            elif isinstance(part.get("text"), str) and not part.get("thought"):
                text += part["text"]
        if candidate.get("finishReason"):
            state.stop_reason = candidate["finishReason"]
            state.finished = True
        if text:
            state.text.append(text)
        return text


PROVIDERS: dict[str, tuple[str, Wire]] = {
    "providerA": ("Provider A (Anthropic Messages API)", AnthropicMessages()),
    "providerB": ("Provider B (OpenAI Chat Completions)", OpenAIChat()),
    "providerC": ("Provider C (Gemini generateContent)", GeminiGenerate()),
}


# ---- transport --------------------------------------------------------------------------


_POOL: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[float, httpx.AsyncClient]] = (
    weakref.WeakKeyDictionary()
)


def _client(request: CompletionRequest) -> httpx.AsyncClient:
    """A pooled egress-guarded client per event loop and timeout, so connections are reused.

    Private addresses are allowed: the base URL is operator configuration, not caller input.
    """
    clients = _POOL.setdefault(asyncio.get_running_loop(), {})
    client = clients.get(request.timeout_s)
    if client is None or client.is_closed:
        client = clients[request.timeout_s] = egress_client(
            allow_private=True, timeout=httpx.Timeout(request.timeout_s)
        )
    return client


def _check(provider: str, request: CompletionRequest) -> None:
    """Refuse a request without a base URL or key before calling anything."""
    if not request.base_url:
        raise ProviderError(f"{provider} has no base URL configured")
    if not request.api_key:
        raise ProviderError(f"{provider} has no API key configured")


async def _send(
    provider: str, wire: Wire, client: httpx.AsyncClient, request: CompletionRequest, stream: bool
) -> httpx.Response:
    """POST with retries of 429, 5xx and connection failures; a 2xx response (read unless streaming)."""
    url = wire.url(request, stream)
    headers = {**wire.headers(request), "Accept": "text/event-stream" if stream else "application/json"}
    body = wire.body(request, stream)
    attempts = max(0, request.max_retries) + 1
    for attempt in range(attempts):
        delay = _backoff(attempt)
        try:
            async with asyncio.timeout(None if stream else request.timeout_s):
                response = await client.send(client.build_request("POST", url, headers=headers, json=body),
                                             stream=True)
                if response.is_success and stream:
                    return response
                try:
                    await response.aread()
                finally:
                    await response.aclose()
        except EgressDenied as exc:
            raise ProviderError(f"{provider} base URL is not reachable: {_redact(str(exc), request.api_key)}",
                                None) from None
        except (TimeoutError, httpx.TimeoutException):
            error = ProviderError(f"{provider} timed out after {request.timeout_s:g} s", None, retryable=True)
        except httpx.TransportError as exc:
            error = ProviderError(f"{provider} connection failed ({type(exc).__name__})", None,
                                  retryable=True)
        else:
            status = response.status_code
            if response.is_success:
                return response
            error = ProviderError(
                f"{provider} answered HTTP {status}: {_upstream_message(response, request.api_key)}",
                status, retryable=status == 429 or status >= 500,
            )
            if not error.retryable:
                raise error
            waited = _retry_after(response)
            if waited is not None:
                delay = min(waited, MAX_DELAY_S)
        if attempt == attempts - 1:
            raise error
        log.warning("provider call retried", extra={"provider": provider, "status": error.status,
                                                    "attempt": attempt + 1, "delayS": delay,
                                                    "detail": error.detail})
        await asyncio.sleep(delay)
    raise AssertionError("unreachable")


async def _sse(response: httpx.Response) -> AsyncIterator[tuple[str, str]]:
    """(event, data) pairs of a server-sent event stream."""
    event, data = "", []
    async for line in response.aiter_lines():
        if not line:
            if data:
                yield event or "message", "\n".join(data)
            event, data = "", []
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
    if data:
        yield event or "message", "\n".join(data)


async def _complete(provider: str, wire: Wire, request: CompletionRequest) -> CompletionResponse:
    """One whole call."""
    _check(provider, request)
    response = await _send(provider, wire, _client(request), request, stream=False)
    try:
        return wire.parse(response.json(), request)
    except (ValueError, UnicodeDecodeError):
        raise ProviderError(f"{provider} returned a malformed response: the body is not JSON", None) from None
    except Malformed as exc:
        raise ProviderError(f"{provider} returned a malformed response: {exc}", None) from None


async def _chunks(
    provider: str, wire: Wire, request: CompletionRequest
) -> AsyncGenerator[StreamChunk, None]:
    """The streamed call: text chunks, then one done chunk with the whole answer."""
    response = await _send(provider, wire, _client(request), request, stream=True)
    state = StreamState()
    try:
        async for event, data in _sse(response):
            try:
                payload: Any = data if data == "[DONE]" else json.loads(data)
                text = wire.feed(state, event, payload, request)
            except ValueError:
                raise ProviderError(f"{provider} streamed a malformed event: not JSON", None) from None
            except Malformed as exc:
                raise ProviderError(f"{provider} streamed a malformed event: {exc}", None) from None
            if text:
                yield StreamChunk(text=text)
    except httpx.TimeoutException:
        raise ProviderError(f"{provider} stream stalled for {request.timeout_s:g} s", None,
                            retryable=True) from None
    except httpx.TransportError as exc:
        raise ProviderError(f"{provider} stream broke ({type(exc).__name__})", None,
                            retryable=True) from None
    finally:
        await response.aclose()
    if not state.finished:
        raise ProviderError(f"{provider} stream ended before the answer was complete", None,
                            retryable=True)
    try:
        done = state.response(provider)
    except Malformed as exc:
        raise ProviderError(f"{provider} streamed a malformed answer: {exc}", None) from None
    yield StreamChunk(done=True, response=done)


async def _prepend(
    first: StreamChunk, rest: AsyncGenerator[StreamChunk, None]
) -> AsyncGenerator[StreamChunk, None]:
    """The first chunk, then the rest (closing the rest however iteration ends)."""
    try:
        yield first
        async for chunk in rest:
            yield chunk
    finally:
        await rest.aclose()


# ---- hooks ----------------------------------------------------------------------------


@hookimpl
def svc_llm_providers() -> list[ProviderInfo]:
    """providerA, providerB and providerC with their catalogue models."""
    return [ProviderInfo(id=pid, label=label, wire_format=wire.wire_format, models=_catalogue_models(pid))
            for pid, (label, wire) in PROVIDERS.items()]


@hookimpl
async def svc_llm_complete(provider: str, request: CompletionRequest) -> CompletionResponse | None:
    """One call with retries; None when the provider is not one of ours."""
    entry = PROVIDERS.get(provider)
    if entry is None:
        return None
    return await _complete(provider, entry[1], request)


@hookimpl
async def svc_llm_stream(provider: str, request: CompletionRequest) -> AsyncIterator[StreamChunk] | None:
    """A streamed call, connected (with retries) and read up to its first chunk before returning."""
    entry = PROVIDERS.get(provider)
    if entry is None:
        return None
    _check(provider, request)
    chunks = _chunks(provider, entry[1], request)
    try:
        first = await anext(chunks)
    except BaseException:
        await chunks.aclose()
        raise
    return _prepend(first, chunks)
