"""Fake LLM upstreams speaking the three provider wire formats, for tests over real HTTP.

    fake = FakeLLM("providerA")               # or a wire format: "anthropic-messages", ...
    server = await aiohttp_server(fake.app())
    base_url = fake.url(server)               # what CompletionRequest.base_url should be
    fake.script(text="Hello", input_tokens=12, output_tokens=3)
    fake.script(tool_calls=[{"name": "lookup", "arguments": {"q": "x"}}])
    fake.fail_next(2, status=503, retry_after=0.1)
    fake.requests[-1].body                    # what the client sent

Endpoints: anthropic-messages `POST /v1/messages`; openai-chat `POST /v1/chat/completions`;
gemini-generate `POST /v1beta/models/{model}:generateContent` and
`:streamGenerateContent?alt=sse`. Each checks its auth header (401 otherwise) and the
request's shape (400 with the problems otherwise), then answers the next scripted reply
(`default_text` when the queue is empty), streamed as SSE when the request asks. Error
bodies echo the key they received, as a careless upstream might, so tests can check the
client never repeats it. Every request is recorded, including refused ones.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

WIRE_FORMATS = {
    "providerA": "anthropic-messages",
    "providerB": "openai-chat",
    "providerC": "gemini-generate",
}
DEFAULT_KEY = "sk-fake-llm-secret-0123456789"
ANTHROPIC_VERSION = "2023-06-01"
GEMINI_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
PART_KINDS = frozenset({"text", "functionCall", "functionResponse"})
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    529: "overloaded_error",
}


@dataclass
class Reply:
    """One scripted answer: text and/or tool calls ({name, arguments, id?}), with token counts.

    `raw` replaces the whole 200 body (for malformed-response tests).
    """

    text: str = ""
    tool_calls: tuple[dict[str, Any], ...] = ()
    input_tokens: int = 10
    output_tokens: int = 5
    raw: str | None = None


@dataclass
class Failure:
    """One scripted error answer."""

    status: int
    retry_after: float | None = None
    message: str | None = None


@dataclass
class Recorded:
    """One request as the fake received it (header names lower-cased)."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    at: float

    @property
    def streamed(self) -> bool:
        """Whether the request asked for a streamed answer."""
        if "streamGenerateContent" in self.path:
            return True
        return isinstance(self.body, dict) and self.body.get("stream") is True


class BadRequest(Exception):
    """The request's shape is wrong; the message lists the problems."""


@dataclass
class FakeLLM:
    """A scripted fake upstream for one wire format (a provider id or a wire format name)."""

    provider: str = "providerA"
    api_key: str = DEFAULT_KEY
    latency_s: float = 0.0
    # While True, every call waits (after it is recorded) until a test sets it False: calls held in
    # flight as long as a scenario needs, and released together (polled: the server may run in
    # another thread than the test).
    holding: bool = False
    # Calls after the first `hold_after` wait the same way (until it is set back to None): a later
    # step held in flight while the earlier ones are answered, with no race against the test.
    hold_after: int | None = None
    # The calls at these positions (1 = the first call) wait the same way until their position is
    # removed: one call held in flight (a worker killed inside it, an orphan answered late) while
    # the calls after it are answered.
    hold_calls: set[int] = field(default_factory=set)
    chunk_delay_s: float = 0.0
    # Streaming faults: cut the connection after this many events; count finished and abandoned streams.
    break_stream_after: int | None = None
    streams_finished: int = 0
    streams_abandoned: int = 0
    sent: list[tuple[float, Any]] = field(default_factory=list)  # (perf_counter, event data) as written
    default_text: str = "ok"
    replies: deque[Reply] = field(default_factory=deque)
    failures: deque[Failure] = field(default_factory=deque)
    requests: list[Recorded] = field(default_factory=list)
    # The upstream model names this server serves (None: any), as a real upstream knows its own
    # models: another name answers 404 "model not found" (Ollama: "try pulling it first").
    models: frozenset[str] | None = None
    _ids: int = 0

    @property
    def wire_format(self) -> str:
        """anthropic-messages, openai-chat or gemini-generate."""
        return WIRE_FORMATS.get(self.provider, self.provider)

    # ---- the API tests use --------------------------------------------------------------

    def script(
        self,
        text: str = "",
        tool_calls: list[dict[str, Any]] | tuple[dict[str, Any], ...] = (),
        input_tokens: int = 10,
        output_tokens: int = 5,
        raw: str | None = None,
    ) -> FakeLLM:
        """Queue one reply (answered in order, streamed or not as each request asks)."""
        for call in tool_calls:
            assert isinstance(call.get("name"), str) and isinstance(call.get("arguments", {}), dict)
        self.replies.append(Reply(text, tuple(tool_calls), input_tokens, output_tokens, raw))
        return self

    def fail_next(
        self, n: int = 1, status: int = 500, retry_after: float | None = None, message: str | None = None
    ) -> FakeLLM:
        """Answer the next `n` authorised calls with `status` (and a Retry-After header if given)."""
        self.failures.extend(Failure(status, retry_after, message) for _ in range(n))
        return self

    def url(self, server: TestServer) -> str:
        """The base URL a client should use for this fake (openai-chat's includes /v1)."""
        root = str(server.make_url("")).rstrip("/")
        return f"{root}/v1" if self.wire_format == "openai-chat" else root

    @property
    def bodies(self) -> list[Any]:
        """The JSON bodies received so far."""
        return [r.body for r in self.requests]

    def app(self) -> web.Application:
        """The fake as an aiohttp application."""
        app = web.Application()
        if self.wire_format == "anthropic-messages":
            app.router.add_post("/v1/messages", self._handle)
            app.router.add_get("/v1/models", self._models)
        elif self.wire_format == "openai-chat":
            app.router.add_post("/v1/chat/completions", self._handle)
            app.router.add_get("/v1/models", self._models)
        elif self.wire_format == "gemini-generate":
            app.router.add_post("/v1beta/models/{target}", self._handle)
            app.router.add_get("/v1beta/models", self._models)
        else:
            raise ValueError(f"unknown wire format {self.wire_format!r}")
        return app

    # ---- handling -----------------------------------------------------------------------

    def _next_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}{self._ids}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        """Record, authorise, fail if scripted, validate, answer."""
        raw = await request.read()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        headers = {k.lower(): v for k, v in request.headers.items()}
        self.requests.append(
            Recorded(request.method, request.path, dict(request.query), headers, body, time.monotonic())
        )
        position = len(self.requests)
        while (
            self.holding
            or (self.hold_after is not None and position > self.hold_after)
            or position in self.hold_calls
        ):
            await asyncio.sleep(0.05)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        received = self._received_key(headers)
        if received != self.api_key:
            return self._error(401, "invalid API key", received)
        if self.failures:
            failure = self.failures.popleft()
            response = self._error(
                failure.status, failure.message or f"scripted failure {failure.status}", received
            )
            if failure.retry_after is not None:
                response.headers["Retry-After"] = f"{failure.retry_after:g}"
            return response
        try:
            stream = self._validate(request, body)
        except BadRequest as exc:
            return self._error(400, str(exc), received)
        model = self._model_of(request, body)
        if self.models is not None and model not in self.models:
            return self._error(404, f"model {model!r} not found, try pulling it first", received)
        reply = self.replies.popleft() if self.replies else Reply(text=self.default_text)
        if reply.raw is not None:
            return web.Response(text=reply.raw, content_type="application/json")
        if self.wire_format == "anthropic-messages":
            if stream:
                return await self._sse(request, self._anthropic_events(body, reply))
            return web.json_response(self._anthropic_message(body, reply))
        if self.wire_format == "openai-chat":
            if stream:
                include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                return await self._sse(request, self._openai_events(body, reply, include_usage))
            return web.json_response(self._openai_completion(body, reply))
        if stream:
            return await self._sse(request, self._gemini_events(reply))
        return web.json_response(self._gemini_response(reply))

    def _model_of(self, request: web.Request, body: dict[str, Any]) -> str:
        """The upstream model name the request asks for (in the body, or Gemini's path)."""
        if self.wire_format == "gemini-generate":
            return request.match_info["target"].partition(":")[0]
        return str(body.get("model"))

    async def _models(self, request: web.Request) -> web.Response:
        """The list-models call (authorised like the others), in this format's shape."""
        headers = {k.lower(): v for k, v in request.headers.items()}
        self.requests.append(
            Recorded(request.method, request.path, dict(request.query), headers, None, time.monotonic())
        )
        received = self._received_key(headers)
        if received != self.api_key:
            return self._error(401, "invalid API key", received)
        if self.wire_format == "anthropic-messages":
            model = {
                "type": "model",
                "id": "fake-model",
                "display_name": "Fake",
                "created_at": "2025-01-01T00:00:00Z",
            }
            return web.json_response(
                {"data": [model], "has_more": False, "first_id": "fake-model", "last_id": "fake-model"}
            )
        if self.wire_format == "openai-chat":
            model = {"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake"}
            return web.json_response({"object": "list", "data": [model]})
        return web.json_response({"models": [{"name": "models/fake-model", "displayName": "Fake"}]})

    def _received_key(self, headers: dict[str, str]) -> str | None:
        """The key the request presented in this format's header."""
        if self.wire_format == "anthropic-messages":
            return headers.get("x-api-key")
        if self.wire_format == "openai-chat":
            auth = headers.get("authorization", "")
            return auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
        return headers.get("x-goog-api-key")

    def _error(self, status: int, message: str, received: str | None) -> web.Response:
        """An error body in this format's style, echoing the key it received."""
        message = f"{message} (request key: {received})"
        if self.wire_format == "anthropic-messages":
            kind = ANTHROPIC_TYPES.get(status, "api_error")
            body: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
        elif self.wire_format == "openai-chat":
            body = {
                "error": {
                    "message": message,
                    "type": "invalid_request_error" if status < 500 else "server_error",
                    "param": None,
                    "code": None,
                }
            }
        else:
            body = {
                "error": {"code": status, "message": message, "status": GEMINI_STATUS.get(status, "UNKNOWN")}
            }
        return web.json_response(body, status=status)

    async def _sse(self, request: web.Request, events: list[tuple[str | None, Any]]) -> web.StreamResponse:
        """Write events as server-sent events, then close."""
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        try:
            for index, (event, data) in enumerate(events):
                if self.break_stream_after is not None and index >= self.break_stream_after:
                    self.break_stream_after = None
                    assert request.transport is not None
                    request.transport.close()  # the upstream dies mid-stream
                    return response
                payload = data if isinstance(data, str) else json.dumps(data)
                prefix = f"event: {event}\n" if event else ""
                await response.write(f"{prefix}data: {payload}\n\n".encode())
                self.sent.append((time.perf_counter(), data))
                if self.chunk_delay_s:
                    await asyncio.sleep(self.chunk_delay_s)
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            self.streams_abandoned += 1  # the client went away
            raise
        self.streams_finished += 1
        return response

    # ---- validation ---------------------------------------------------------------------

    def _validate(self, request: web.Request, body: Any) -> bool:
        """BadRequest unless the request has this format's shape; whether it asks to stream."""
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        if self.wire_format == "anthropic-messages":
            problems = _anthropic_problems(request, body)
            stream = body.get("stream") is True
        elif self.wire_format == "openai-chat":
            problems = _openai_problems(body)
            stream = body.get("stream") is True
        else:
            target = request.match_info["target"]
            model, _, action = target.partition(":")
            problems = _gemini_problems(body)
            if not model:
                problems.append("the model name is empty")
            if action not in ("generateContent", "streamGenerateContent"):
                problems.append(f"unknown method {action!r}")
            stream = action == "streamGenerateContent"
            if stream and request.query.get("alt") != "sse":
                problems.append("streamGenerateContent needs alt=sse")
        if problems:
            raise BadRequest("; ".join(problems))
        return stream

    # ---- anthropic-messages -------------------------------------------------------------

    def _anthropic_blocks(self, reply: Reply) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
        for call in reply.tool_calls:
            blocks.append(
                {
                    "type": "tool_use",
                    "id": call.get("id") or self._next_id("toolu_fake_"),
                    "name": call["name"],
                    "input": call.get("arguments", {}),
                }
            )
        return blocks

    def _anthropic_message(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        return {
            "id": self._next_id("msg_fake_"),
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": self._anthropic_blocks(reply),
            "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens},
        }

    def _anthropic_events(self, body: dict[str, Any], reply: Reply) -> list[tuple[str | None, Any]]:
        message = self._anthropic_message(body, reply)
        start = {
            **message,
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": reply.input_tokens, "output_tokens": 1},
        }
        events: list[tuple[str | None, Any]] = [
            ("message_start", {"type": "message_start", "message": start}),
            ("ping", {"type": "ping"}),
        ]
        for index, block in enumerate(message["content"]):
            if block["type"] == "text":
                events.append(
                    (
                        "content_block_start",
                        {
                            "type": "content_block_start",
                            "index": index,
                            "content_block": {"type": "text", "text": ""},
                        },
                    )
                )
                events += [
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "text_delta", "text": piece},
                        },
                    )
                    for piece in _pieces(block["text"])
                ]
            else:
                events.append(
                    (
                        "content_block_start",
                        {
                            "type": "content_block_start",
                            "index": index,
                            "content_block": {**block, "input": {}},
                        },
                    )
                )
                events += [
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "input_json_delta", "partial_json": p},
                        },
                    )
                    for p in _split(json.dumps(block["input"]), 7)
                ]
            events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
        events.append(
            (
                "message_delta",
                {"type": "message_delta", "delta": delta, "usage": {"output_tokens": reply.output_tokens}},
            )
        )
        events.append(("message_stop", {"type": "message_stop"}))
        return events

    # ---- openai-chat --------------------------------------------------------------------

    def _openai_calls(self, reply: Reply) -> list[dict[str, Any]]:
        return [
            {
                "id": call.get("id") or self._next_id("call_fake_"),
                "type": "function",
                "function": {"name": call["name"], "arguments": json.dumps(call.get("arguments", {}))},
            }
            for call in reply.tool_calls
        ]

    def _openai_completion(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None, "refusal": None}
        if reply.tool_calls:
            message["tool_calls"] = self._openai_calls(reply)
        return {
            "id": self._next_id("chatcmpl-fake-"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": "tool_calls" if reply.tool_calls else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": reply.input_tokens,
                "completion_tokens": reply.output_tokens,
                "total_tokens": reply.input_tokens + reply.output_tokens,
            },
        }

    def _openai_events(
        self, body: dict[str, Any], reply: Reply, include_usage: bool
    ) -> list[tuple[str | None, Any]]:
        base = {
            "id": self._next_id("chatcmpl-fake-"),
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body["model"],
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, dict[str, Any]]:
            extra = {"usage": None} if include_usage else {}
            return None, {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}

        events: list[tuple[str | None, Any]] = [chunk({"role": "assistant", "content": ""})]
        events += [chunk({"content": piece}) for piece in _pieces(reply.text)]
        for index, call in enumerate(self._openai_calls(reply)):
            events.append(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": call["id"],
                                "type": "function",
                                "function": {"name": call["function"]["name"], "arguments": ""},
                            }
                        ]
                    }
                )
            )
            events += [
                chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]})
                for p in _split(call["function"]["arguments"], 7)
            ]
        events.append(chunk({}, "tool_calls" if reply.tool_calls else "stop"))
        if include_usage:
            events.append(
                (
                    None,
                    {
                        **base,
                        "choices": [],
                        "usage": {
                            "prompt_tokens": reply.input_tokens,
                            "completion_tokens": reply.output_tokens,
                            "total_tokens": reply.input_tokens + reply.output_tokens,
                        },
                    },
                )
            )
        events.append((None, "[DONE]"))
        return events

    # ---- gemini-generate ----------------------------------------------------------------

    @staticmethod
    def _gemini_call(call: dict[str, Any]) -> dict[str, Any]:
        function: dict[str, Any] = {"name": call["name"], "args": call.get("arguments", {})}
        if call.get("id"):
            function["id"] = call["id"]
        return {"functionCall": function}

    def _gemini_response(self, reply: Reply) -> dict[str, Any]:
        parts: list[dict[str, Any]] = [{"text": reply.text}] if reply.text else []
        parts += [self._gemini_call(call) for call in reply.tool_calls]
        candidate = {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
        return {
            "candidates": [candidate],
            "usageMetadata": {
                "promptTokenCount": reply.input_tokens,
                "candidatesTokenCount": reply.output_tokens,
                "totalTokenCount": reply.input_tokens + reply.output_tokens,
            },
            "modelVersion": "fake",
        }

    def _gemini_events(self, reply: Reply) -> list[tuple[str | None, Any]]:
        pieces = _pieces(reply.text)
        events: list[tuple[str | None, Any]] = []
        for i, piece in enumerate(pieces):
            events.append(
                (
                    None,
                    {
                        "candidates": [
                            {"content": {"role": "model", "parts": [{"text": piece}]}, "index": 0}
                        ],
                        "usageMetadata": {
                            "promptTokenCount": reply.input_tokens,
                            "candidatesTokenCount": i + 1,
                        },
                    },
                )
            )
        last = self._gemini_response(
            Reply(
                tool_calls=reply.tool_calls,
                input_tokens=reply.input_tokens,
                output_tokens=reply.output_tokens,
            )
        )
        if not reply.tool_calls:
            last["candidates"][0]["content"]["parts"] = [{"text": ""}]
        events.append((None, last))
        return events


# ---- request shape checks -------------------------------------------------------------------


def _pieces(text: str) -> list[str]:
    """The text split into word-sized stream pieces (joined they give the text back)."""
    return re.findall(r"\s*\S+\s*", text) or ([text] if text else [])


def _split(text: str, size: int) -> list[str]:
    """The text in pieces of `size` characters."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _tools_problems(tools: Any, where: str, schema_key: str) -> list[str]:
    """Problems of a list of tool declarations {name, description, <schema_key>}."""
    if not isinstance(tools, list) or not tools:
        return [f"{where} must be a non-empty array"]
    problems = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) or not tool["name"]:
            problems.append(f"{where}[{i}].name is required")
        elif not isinstance(tool.get(schema_key), dict) or tool[schema_key].get("type") != "object":
            problems.append(f"{where}[{i}].{schema_key} must be an object schema")
        elif "description" in tool and not isinstance(tool["description"], str):
            problems.append(f"{where}[{i}].description must be a string")
    return problems


def _common_problems(body: dict[str, Any], max_key: str | None) -> list[str]:
    problems = []
    if max_key and (not isinstance(body.get(max_key), int) or body[max_key] <= 0):
        problems.append(f"{max_key} must be a positive integer")
    temperature = body.get("temperature")
    if temperature is not None and (not isinstance(temperature, int | float) or not 0 <= temperature <= 2):
        problems.append("temperature must be a number from 0 to 2")
    return problems


def _anthropic_problems(request: web.Request, body: dict[str, Any]) -> list[str]:
    """The Messages API's rules, including that each tool_use is answered by the next user turn."""
    problems = _common_problems(body, "max_tokens")
    if request.headers.get("anthropic-version") != ANTHROPIC_VERSION:
        problems.append(f"anthropic-version must be {ANTHROPIC_VERSION}")
    if not isinstance(body.get("model"), str) or not body["model"]:
        problems.append("model is required")
    if "system" in body and not isinstance(body["system"], str | list):
        problems.append("system must be a string or blocks")
    if "tools" in body:
        problems += _tools_problems(body["tools"], "tools", "input_schema")
    if "stream" in body and not isinstance(body["stream"], bool):
        problems.append("stream must be a boolean")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return [*problems, "messages must be a non-empty array"]
    pending: set[str] = set()
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            problems.append(f"{where}.role must be user or assistant")
            continue
        if i == 0 and message["role"] != "user":
            problems.append("the first message must be a user message")
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list) or not blocks:
            problems.append(f"{where}.content must be a string or a non-empty array")
            continue
        answered: set[str] = set()
        used: set[str] = set()
        for j, block in enumerate(blocks):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text" and isinstance(block.get("text"), str):
                continue
            if kind == "tool_use" and message["role"] == "assistant":
                if (
                    not isinstance(block.get("id"), str)
                    or not isinstance(block.get("name"), str)
                    or not isinstance(block.get("input"), dict)
                ):
                    problems.append(f"{where}.content[{j}] tool_use needs id, name and an input object")
                else:
                    used.add(block["id"])
            elif kind == "tool_result" and message["role"] == "user":
                if block.get("tool_use_id") not in pending:
                    problems.append(
                        f"{where}.content[{j}] tool_result for unknown tool_use_id "
                        f"{block.get('tool_use_id')!r}"
                    )
                elif not isinstance(block.get("content"), str | list):
                    problems.append(f"{where}.content[{j}] tool_result content must be a string or blocks")
                answered.add(str(block.get("tool_use_id")))
            else:
                problems.append(f"{where}.content[{j}] is not a valid {message['role']} block")
        if message["role"] == "user" and pending - answered:
            problems.append(f"{where} does not answer tool_use ids {sorted(pending - answered)}")
        pending = used if message["role"] == "assistant" else set()
    return problems


def _openai_problems(body: dict[str, Any]) -> list[str]:
    """Chat Completions' rules, including that each tool call is answered by a `tool` message."""
    problems = _common_problems(body, "max_tokens" if "max_tokens" in body else None)
    if not isinstance(body.get("model"), str) or not body["model"]:
        problems.append("model is required")
    if "tools" in body:
        tools = body["tools"]
        if not isinstance(tools, list) or not all(
            isinstance(t, dict) and t.get("type") == "function" for t in tools
        ):
            problems.append("tools must be an array of {type: function, function}")
        else:
            problems += _tools_problems([t.get("function") for t in tools], "tools[].function", "parameters")
    if "stream_options" in body and body.get("stream") is not True:
        problems.append("stream_options is only allowed when stream is true")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return [*problems, "messages must be a non-empty array"]
    pending: set[str] = set()
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("system", "developer", "user", "assistant", "tool"):
            problems.append(f"{where}.role is not valid")
            continue
        if role == "tool":
            if message.get("tool_call_id") not in pending:
                problems.append(
                    f"{where}.tool_call_id {message.get('tool_call_id')!r} answers no pending call"
                )
            pending.discard(message.get("tool_call_id"))
            if not isinstance(message.get("content"), str):
                problems.append(f"{where}.content must be a string")
            continue
        if pending:
            problems.append(f"{where}: tool calls {sorted(pending)} were not answered")
            pending = set()
        if role == "assistant" and message.get("tool_calls") is not None:
            calls = message["tool_calls"] if isinstance(message["tool_calls"], list) else [None]
            for j, call in enumerate(calls):
                function = call.get("function") if isinstance(call, dict) else None
                if (
                    not isinstance(call, dict)
                    or call.get("type") != "function"
                    or not isinstance(call.get("id"), str)
                    or not isinstance(function, dict)
                    or not isinstance(function.get("name"), str)
                    or not isinstance(function.get("arguments"), str)
                ):
                    problems.append(f"{where}.tool_calls[{j}] must be {{id, type: function, function}}")
                    continue
                try:
                    json.loads(function["arguments"])
                except ValueError:
                    problems.append(f"{where}.tool_calls[{j}].function.arguments is not JSON")
                pending.add(call["id"])
            if message.get("content") is not None and not isinstance(message["content"], str):
                problems.append(f"{where}.content must be a string or null")
        elif not isinstance(message.get("content"), str):
            problems.append(f"{where}.content must be a string")
    if pending:
        problems.append(f"tool calls {sorted(pending)} were not answered")
    return problems


def _gemini_problems(body: dict[str, Any]) -> list[str]:
    """generateContent's rules, including one functionResponse per functionCall of the model turn."""
    problems = []
    config = body.get("generationConfig", {})
    if not isinstance(config, dict):
        problems.append("generationConfig must be an object")
    else:
        problems += _common_problems(config, "maxOutputTokens" if "maxOutputTokens" in config else None)
    system = body.get("systemInstruction")
    if system is not None and (
        not isinstance(system, dict)
        or not isinstance(system.get("parts"), list)
        or not all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in system["parts"])
    ):
        problems.append("systemInstruction must be {parts: [{text}]}")
    if "tools" in body:
        tools = body["tools"]
        if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
            problems.append("tools must be an array of objects")
        else:
            for tool in tools:
                problems += _tools_problems(
                    tool.get("functionDeclarations"), "functionDeclarations", "parameters"
                )
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        return [*problems, "contents must be a non-empty array"]
    calls: list[str] = []
    for i, content in enumerate(contents):
        where = f"contents[{i}]"
        role = content.get("role") if isinstance(content, dict) else None
        parts = content.get("parts") if isinstance(content, dict) else None
        if role not in ("user", "model") or not isinstance(parts, list) or not parts:
            problems.append(f"{where} must have role user or model and non-empty parts")
            continue
        responses: list[str] = []
        made: list[str] = []
        for j, part in enumerate(parts):
            keys = set(part) & PART_KINDS if isinstance(part, dict) else set()
            if len(keys) != 1:
                problems.append(f"{where}.parts[{j}] must have exactly one of {sorted(PART_KINDS)}")
                continue
            (key,) = keys
            value = part[key]
            if key == "text" and not isinstance(value, str):
                problems.append(f"{where}.parts[{j}].text must be a string")
            elif key == "functionCall":
                if (
                    role != "model"
                    or not isinstance(value, dict)
                    or not isinstance(value.get("name"), str)
                    or not isinstance(value.get("args", {}), dict)
                ):
                    problems.append(f"{where}.parts[{j}].functionCall must be {{name, args}} in a model turn")
                else:
                    made.append(value["name"])
            elif key == "functionResponse":
                if (
                    role != "user"
                    or not isinstance(value, dict)
                    or not isinstance(value.get("name"), str)
                    or not isinstance(value.get("response"), dict)
                ):
                    problems.append(
                        f"{where}.parts[{j}].functionResponse must be {{name, response}} in a user turn"
                    )
                else:
                    responses.append(value["name"])
        if role == "user" and (responses or calls) and sorted(responses) != sorted(calls):
            problems.append(
                f"{where} must answer the function calls {sorted(calls)} (got {sorted(responses)})"
            )
        calls = made if role == "model" else []
    return problems
