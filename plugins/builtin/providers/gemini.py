"""providerC: the Gemini generateContent wire format."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

from plugins.builtin.providers.wire import (
    Malformed,
    StreamState,
    _arguments,
    _int,
    _list,
    _obj,
    _tool_names,
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
            body["tools"] = [
                {
                    "functionDeclarations": [
                        {"name": t.name, "description": t.description, "parameters": t.parameters}
                        for t in request.tools
                    ]
                }
            ]
        return body

    @staticmethod
    def first_call_number(request: CompletionRequest) -> int:
        """The n of the next `call_<n>` id: ids stay unique across the conversation."""
        return 1 + sum(len(m.tool_calls) for m in request.messages)

    def candidate(self, data: dict[str, Any], final: bool) -> dict[str, Any] | None:
        """The first candidate; a blocked prompt is an error, a chunk without one is None."""
        candidates = data.get("candidates")
        if not candidates:
            feedback = found if isinstance(found := data.get("promptFeedback"), dict) else {}
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
        usage = found if isinstance(found := data.get("usageMetadata"), dict) else {}
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
            text="".join(text),
            tool_calls=tuple(calls),
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            stop_reason=candidate.get("finishReason"),
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
