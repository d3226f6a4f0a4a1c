"""providerB: the OpenAI Chat Completions wire format (any OpenAI-compatible server)."""

from __future__ import annotations

import json
import logging
from typing import Any

from plugins.builtin.providers.wire import (
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
    CompletionRequest,
    CompletionResponse,
    ProviderError,
    ToolCall,
)

log = logging.getLogger(__name__)

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
                out.append(
                    {
                        "role": "assistant",
                        "content": m.content or None,
                        "tool_calls": [
                            {
                                "id": c.id,
                                "type": "function",
                                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                            }
                            for c in m.tool_calls
                        ],
                    }
                )
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
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
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
            calls.append(
                ToolCall(
                    call["id"], function["name"], _arguments(function.get("arguments"), f"tool_calls[{i}]")
                )
            )
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        content = message.get("content")
        return CompletionResponse(
            text=content if isinstance(content, str) else "",
            tool_calls=tuple(calls),
            input_tokens=_int(usage.get("prompt_tokens")),
            output_tokens=_int(usage.get("completion_tokens")),
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
            delta = found if isinstance(found := choice.get("delta"), dict) else {}
            if isinstance(delta.get("content"), str) and delta["content"]:
                text += delta["content"]
            for tool_raw in delta.get("tool_calls") or []:
                tool = _obj(tool_raw, "a tool_calls delta")
                acc = state.tools.setdefault(_int(tool.get("index")), _ToolAcc())
                acc.id = tool.get("id") or acc.id
                function = found if isinstance(found := tool.get("function"), dict) else {}
                acc.name = function.get("name") or acc.name
                acc.json += function.get("arguments") or ""
            if choice.get("finish_reason"):
                state.stop_reason = choice["finish_reason"]
                state.finished = True
        if text:
            state.text.append(text)
        return text
