"""providerA: the Anthropic Messages API wire format."""

from __future__ import annotations

import logging
from typing import Any

from plugins.builtin.providers.wire import (
    ANTHROPIC_VERSION,
    SNIPPET_CHARS,
    Malformed,
    StreamState,
    _arguments,
    _int,
    _list,
    _obj,
    _redact,
    _ToolAcc,
)
from plugins.types import (
    ChatMessage,
    CompletionRequest,
    CompletionResponse,
    ProviderError,
    ToolCall,
)

log = logging.getLogger(__name__)

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
                if (
                    last
                    and last["role"] == "user"
                    and isinstance(last["content"], list)
                    and all(b.get("type") == "tool_result" for b in last["content"])
                ):
                    last["content"].append(block)
                else:
                    out.append({"role": "user", "content": [block]})
            elif m.role == "assistant" and m.tool_calls:
                blocks: list[dict[str, Any]] = [{"type": "text", "text": m.content}] if m.content else []
                blocks += [
                    {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                    for c in m.tool_calls
                ]
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
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in request.tools
            ]
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
            text="".join(text),
            tool_calls=tuple(calls),
            input_tokens=_int(usage.get("input_tokens")),
            output_tokens=_int(usage.get("output_tokens")),
            stop_reason=data.get("stop_reason"),
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
                state.tools[_int(data.get("index"))] = _ToolAcc(
                    id=str(block.get("id") or ""), name=str(block.get("name") or "")
                )
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
            raise ProviderError(
                f"providerA stream failed: {message[:SNIPPET_CHARS]}",
                None,
                retryable=error.get("type") in ("overloaded_error", "api_error"),
            )
        return ""
