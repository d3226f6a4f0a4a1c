"""The built-in LLM providers, through the plugin manager, against fake upstreams over real HTTP."""

from __future__ import annotations

import json
import logging
import socket
from dataclasses import dataclass
from typing import Any

import pytest

from config.catalogue import UPSTREAM
from plugins.manager import Plugins
from plugins.types import (
    ChatMessage,
    CompletionRequest,
    CompletionResponse,
    ProviderError,
    StreamChunk,
    ToolCall,
    ToolSpec,
)
from tests.fakes.llm import FakeLLM

PROVIDERS = ("providerA", "providerB", "providerC")
MODELS = {"providerA": "providerA:small", "providerB": "providerB:mini", "providerC": "providerC:flash"}
SYSTEM = "You are terse."
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = ToolSpec(name="get_weather", description="Current weather of a city.", parameters=SCHEMA)
CLOCK = ToolSpec(name="get_time", description="Local time of a city.", parameters=SCHEMA)
QUESTION = ChatMessage(role="user", content="Weather in Paris?")


@dataclass
class Upstream:
    """One provider, its fake and the plugins under test."""

    provider: str
    fake: FakeLLM
    base_url: str
    plugins: Plugins

    def request(self, *messages: ChatMessage, **overrides: Any) -> CompletionRequest:
        """A request for the provider's model against the fake."""
        model = MODELS[self.provider]
        values: dict[str, Any] = {
            "model": model,
            "upstream_model": UPSTREAM[model],
            "system": SYSTEM,
            "messages": messages or (ChatMessage(role="user", content="Hi"),),
            "api_key": self.fake.api_key,
            "base_url": self.base_url,
            "max_tokens": 256,
            "timeout_s": 5.0,
        }
        return CompletionRequest(**{**values, **overrides})

    async def complete(self, *messages: ChatMessage, **overrides: Any) -> CompletionResponse:
        """One call through the manager."""
        return await self.plugins.complete(self.provider, self.request(*messages, **overrides))

    async def stream(self, *messages: ChatMessage, **overrides: Any) -> list[StreamChunk]:
        """A streamed call through the manager, collected."""
        chunks = await self.plugins.stream(self.provider, self.request(*messages, **overrides))
        return [chunk async for chunk in chunks]


def make_plugins() -> Plugins:
    """Only the provider plugin."""
    return Plugins(builtins=("plugins.builtin.providers",))


@pytest.fixture(params=PROVIDERS)
async def up(request: pytest.FixtureRequest, aiohttp_server: Any) -> Upstream:
    """Each provider against its own fake upstream."""
    fake = FakeLLM(request.param)
    server = await aiohttp_server(fake.app())
    return Upstream(request.param, fake, fake.url(server), make_plugins())


def free_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---- what each wire format should carry ----------------------------------------------------------


def expected_tools(provider: str, *tools: ToolSpec) -> list[dict[str, Any]]:
    """The tools as the provider's wire format declares them."""
    declared = [{"name": t.name, "description": t.description, t_key(provider): t.parameters} for t in tools]
    if provider == "providerA":
        return declared
    if provider == "providerB":
        return [{"type": "function", "function": d} for d in declared]
    return [{"functionDeclarations": declared}]


def t_key(provider: str) -> str:
    """The name of a tool's schema field."""
    return "input_schema" if provider == "providerA" else "parameters"


def expected_conversation(provider: str, calls: list[ToolCall], results: list[str]) -> list[dict[str, Any]]:
    """QUESTION, the assistant's tool calls and their results, as the provider's wire format carries them."""
    if provider == "providerA":
        return [
            {"role": "user", "content": QUESTION.content},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in calls
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": c.id, "content": r}
                    for c, r in zip(calls, results, strict=True)
                ],
            },
        ]
    if provider == "providerB":
        return [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": QUESTION.content},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                    }
                    for c in calls
                ],
            },
            *(
                {"role": "tool", "tool_call_id": c.id, "content": r}
                for c, r in zip(calls, results, strict=True)
            ),
        ]
    return [
        {"role": "user", "parts": [{"text": QUESTION.content}]},
        {"role": "model", "parts": [{"functionCall": {"name": c.name, "args": c.arguments}} for c in calls]},
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": c.name, "response": {"content": r}}}
                for c, r in zip(calls, results, strict=True)
            ],
        },
    ]


def conversation_of(provider: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The turns of a request body."""
    return body["contents"] if provider == "providerC" else body["messages"]


def tools_of(provider: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool declarations of a request body."""
    return body["tools"]


# ---- declaration ---------------------------------------------------------------------------------


def test_providers_declared_with_catalogue_models() -> None:
    """Three providers, their wire formats and every catalogue id of theirs (providerB:mini too)."""
    infos = {p.id: p for p in make_plugins().providers()}
    assert set(infos) == set(PROVIDERS)
    assert infos["providerA"].wire_format == "anthropic-messages"
    assert infos["providerB"].wire_format == "openai-chat"
    assert infos["providerC"].wire_format == "gemini-generate"
    assert infos["providerA"].models == ("providerA:high", "providerA:middle", "providerA:small")
    assert set(infos["providerB"].models) == {
        "providerB:standard",
        "providerB:reasoning-small",
        "providerB:code-small",
        "providerB:mini",
    }
    assert infos["providerC"].models == ("providerC:pro", "providerC:flash")
    for info in infos.values():
        assert all(model in UPSTREAM for model in info.models)


async def test_unknown_provider_is_not_answered() -> None:
    """A provider id the plugin does not serve falls through to the manager's error."""
    request = CompletionRequest(
        model="x:y", upstream_model="y", system="", messages=(), api_key="k", base_url="http://127.0.0.1:9"
    )
    with pytest.raises(ProviderError, match="no plugin serves"):
        await make_plugins().complete("providerZ", request)
    with pytest.raises(ProviderError, match="no plugin streams"):
        await make_plugins().stream("providerZ", request)


# ---- plain answers -------------------------------------------------------------------------------


async def test_plain_text_answer_with_tokens(up: Upstream) -> None:
    """The request has the wire format's shape and auth; text and token counts come back."""
    up.fake.script(text="Hello there.", input_tokens=12, output_tokens=3)
    response = await up.complete(temperature=0.3)
    assert response.text == "Hello there."
    assert (response.input_tokens, response.output_tokens) == (12, 3)
    assert response.tool_calls == ()
    sent = up.fake.requests[-1]
    hi = ChatMessage(role="user", content="Hi")
    if up.provider == "providerA":
        assert sent.path == "/v1/messages"
        assert sent.headers["x-api-key"] == up.fake.api_key
        assert sent.headers["anthropic-version"] == "2023-06-01"
        assert sent.body == {
            "model": UPSTREAM["providerA:small"],
            "max_tokens": 256,
            "system": SYSTEM,
            "temperature": 0.3,
            "messages": [{"role": "user", "content": hi.content}],
        }
        assert response.stop_reason == "end_turn"
    elif up.provider == "providerB":
        assert sent.path == "/v1/chat/completions"
        assert sent.headers["authorization"] == f"Bearer {up.fake.api_key}"
        assert sent.body == {
            "model": UPSTREAM["providerB:mini"],
            "max_tokens": 256,
            "temperature": 0.3,
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": hi.content}],
        }
        assert response.stop_reason == "stop"
    else:
        assert sent.path == f"/v1beta/models/{UPSTREAM['providerC:flash']}:generateContent"
        assert sent.headers["x-goog-api-key"] == up.fake.api_key
        assert sent.body == {
            "systemInstruction": {"parts": [{"text": SYSTEM}]},
            "contents": [{"role": "user", "parts": [{"text": hi.content}]}],
            "generationConfig": {"maxOutputTokens": 256, "temperature": 0.3},
        }
        assert response.stop_reason == "STOP"


async def test_tool_call_round_trip(up: Upstream) -> None:
    """Tools go out in the provider's format, the call is parsed, the result is serialised back."""
    up.fake.script(
        tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}], input_tokens=40, output_tokens=9
    )
    up.fake.script(text="Sunny and 21 C in Paris.", input_tokens=60, output_tokens=8)
    first = await up.complete(QUESTION, tools=(WEATHER,))
    assert tools_of(up.provider, up.fake.requests[0].body) == expected_tools(up.provider, WEATHER)
    assert len(first.tool_calls) == 1
    call = first.tool_calls[0]
    assert (call.name, call.arguments) == ("get_weather", {"city": "Paris"})
    assert call.id
    if up.provider == "providerC":
        assert call.id == "call_1"
    assert (first.input_tokens, first.output_tokens) == (40, 9)

    follow_up = (
        QUESTION,
        ChatMessage(role="assistant", tool_calls=first.tool_calls),
        ChatMessage(role="tool", content="sunny, 21 C", tool_call_id=call.id),
    )
    second = await up.complete(*follow_up, tools=(WEATHER,))
    assert second.text == "Sunny and 21 C in Paris."
    assert (second.input_tokens, second.output_tokens) == (60, 8)
    body = up.fake.requests[1].body
    assert conversation_of(up.provider, body) == expected_conversation(up.provider, [call], ["sunny, 21 C"])


async def test_parallel_tool_calls_answered_in_one_turn(up: Upstream) -> None:
    """Two calls in one answer; both results go back in the shape the upstream requires."""
    up.fake.script(
        tool_calls=[
            {"name": "get_weather", "arguments": {"city": "Paris"}},
            {"name": "get_time", "arguments": {"city": "Paris"}},
        ]
    )
    up.fake.script(text="Sunny, 14:00.")
    first = await up.complete(QUESTION, tools=(WEATHER, CLOCK))
    assert tools_of(up.provider, up.fake.requests[0].body) == expected_tools(up.provider, WEATHER, CLOCK)
    assert [c.name for c in first.tool_calls] == ["get_weather", "get_time"]
    assert len({c.id for c in first.tool_calls}) == 2
    results = ["sunny", "14:00"]
    second = await up.complete(
        QUESTION,
        ChatMessage(role="assistant", tool_calls=first.tool_calls),
        *(
            ChatMessage(role="tool", content=r, tool_call_id=c.id)
            for c, r in zip(first.tool_calls, results, strict=True)
        ),
        tools=(WEATHER, CLOCK),
    )
    assert second.text == "Sunny, 14:00."
    assert conversation_of(up.provider, up.fake.requests[1].body) == expected_conversation(
        up.provider, list(first.tool_calls), results
    )


async def test_gemini_call_ids_stay_unique_across_turns(aiohttp_server: Any) -> None:
    """providerC numbers its call ids after the calls already in the conversation."""
    fake = FakeLLM("providerC")
    up = Upstream("providerC", fake, fake.url(await aiohttp_server(fake.app())), make_plugins())
    fake.script(tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}])
    fake.script(tool_calls=[{"name": "get_weather", "arguments": {"city": "Lyon"}}])
    first = await up.complete(QUESTION, tools=(WEATHER,))
    history = (
        QUESTION,
        ChatMessage(role="assistant", tool_calls=first.tool_calls),
        ChatMessage(role="tool", content="sunny", tool_call_id="call_1"),
    )
    second = await up.complete(*history, tools=(WEATHER,))
    assert [c.id for c in first.tool_calls + second.tool_calls] == ["call_1", "call_2"]


# ---- streaming -----------------------------------------------------------------------------------


async def test_stream_yields_text_then_done(up: Upstream) -> None:
    """Several text chunks, then one done chunk with the whole text and the token counts."""
    up.fake.script(text="The quick brown fox jumps.", input_tokens=21, output_tokens=6)
    chunks = await up.stream()
    *texts, done = chunks
    assert len(texts) >= 3 and all(c.text and not c.done for c in texts)
    assert "".join(c.text for c in texts) == "The quick brown fox jumps."
    assert done.done and done.response is not None
    assert done.response.text == "The quick brown fox jumps."
    assert (done.response.input_tokens, done.response.output_tokens) == (21, 6)
    sent = up.fake.requests[-1]
    if up.provider == "providerA":
        assert sent.body["stream"] is True
    elif up.provider == "providerB":
        assert sent.body["stream"] is True and sent.body["stream_options"] == {"include_usage": True}
    else:
        assert sent.path == f"/v1beta/models/{UPSTREAM['providerC:flash']}:streamGenerateContent"
        assert sent.query == {"alt": "sse"}


async def test_stream_tool_call(up: Upstream) -> None:
    """A streamed tool call arrives whole in the done chunk."""
    up.fake.script(
        tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2]}}],
        input_tokens=30,
        output_tokens=7,
    )
    chunks = await up.stream(QUESTION, tools=(WEATHER,))
    assert [c.done for c in chunks] == [True]
    response = chunks[-1].response
    assert response is not None
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        ("get_weather", {"city": "Paris", "days": [1, 2]})
    ]
    assert response.tool_calls[0].id
    assert (response.input_tokens, response.output_tokens) == (30, 7)


async def test_stream_closed_early(up: Upstream) -> None:
    """A consumer may stop after the first chunk and close the stream; the next call still works."""
    up.fake.script(text="one two three four five").script(text="again")
    chunks = await up.plugins.stream(up.provider, up.request())
    async for chunk in chunks:
        assert chunk.text == "one "
        break
    await chunks.aclose()  # type: ignore[attr-defined]
    assert (await up.complete()).text == "again"


async def test_stream_retries_before_streaming(up: Upstream) -> None:
    """A 503 before the stream starts is retried like a whole call."""
    up.fake.fail_next(1, status=503).script(text="Back again.")
    chunks = await up.stream()
    assert chunks[-1].response is not None and chunks[-1].response.text == "Back again."
    assert len(up.fake.requests) == 2


async def test_stream_refusal_raises_before_iterating(up: Upstream) -> None:
    """A 400 surfaces when the stream is requested, before any chunk is handed out."""
    up.fake.fail_next(1, status=400, message="bad stream")
    with pytest.raises(ProviderError) as caught:
        await up.plugins.stream(up.provider, up.request())
    assert caught.value.status == 400
    assert up.fake.api_key not in caught.value.detail


# ---- retries and errors --------------------------------------------------------------------------


@pytest.mark.parametrize("status", [503, 429])
async def test_retries_then_success(up: Upstream, status: int) -> None:
    """Two failures are retried with exponential backoff; the third call answers."""
    up.fake.fail_next(2, status=status).script(text="Finally.")
    response = await up.complete(max_retries=3)
    assert response.text == "Finally."
    times = [r.at for r in up.fake.requests]
    assert len(times) == 3
    assert times[1] - times[0] >= 0.18 and times[2] - times[1] >= 0.38


async def test_retry_after_is_honoured(up: Upstream) -> None:
    """A Retry-After header sets the wait (capped at 5 s)."""
    up.fake.fail_next(1, status=429, retry_after=0.6).script(text="ok")
    await up.complete()
    first, second = up.fake.requests
    assert second.at - first.at >= 0.55


async def test_retries_exhausted(up: Upstream, caplog: pytest.LogCaptureFixture) -> None:
    """After max_retries the error names the provider and status, without the key anywhere."""
    caplog.set_level(logging.WARNING)
    up.fake.fail_next(5, status=503, message="overloaded, try later")
    with pytest.raises(ProviderError) as caught:
        await up.complete(max_retries=2)
    error = caught.value
    assert len(up.fake.requests) == 3
    assert error.status == 503 and error.retryable
    assert error.detail.startswith(f"{up.provider} answered HTTP 503: overloaded, try later")
    assert up.fake.api_key not in error.detail and "***" in error.detail
    assert len([r for r in caplog.records if r.name.startswith("plugins.builtin.providers")]) == 2
    assert all(up.fake.api_key not in str(r.__dict__) for r in caplog.records)


async def test_bad_request_is_not_retried(up: Upstream) -> None:
    """A 400 fails at once; the detail has the status but not the key the upstream echoed."""
    up.fake.fail_next(1, status=400, message="max_tokens is too large")
    with pytest.raises(ProviderError) as caught:
        await up.complete(max_retries=3)
    assert len(up.fake.requests) == 1
    assert caught.value.status == 400 and not caught.value.retryable
    assert "HTTP 400" in caught.value.detail and "max_tokens is too large" in caught.value.detail
    assert up.fake.api_key not in caught.value.detail and up.fake.api_key not in str(caught.value)


async def test_wrong_key_is_401(up: Upstream) -> None:
    """A key the upstream refuses: status 401, not retried, the key not repeated."""
    wrong = "sk-wrong-key-9876543210"
    with pytest.raises(ProviderError) as caught:
        await up.complete(api_key=wrong)
    assert caught.value.status == 401 and not caught.value.retryable
    assert wrong not in caught.value.detail
    assert len(up.fake.requests) == 1


@pytest.mark.parametrize("raw", ["this is not json", '{"unexpected": true}'])
async def test_malformed_response(up: Upstream, raw: str) -> None:
    """A 2xx body we cannot read is a clear ProviderError."""
    up.fake.script(raw=raw)
    with pytest.raises(ProviderError, match=f"{up.provider} returned a malformed response: "):
        await up.complete()


async def test_connection_refused_is_retried_then_reported(up: Upstream) -> None:
    """Nothing listening: retried, then a ProviderError without a status."""
    with pytest.raises(ProviderError) as caught:
        await up.complete(base_url=f"http://127.0.0.1:{free_port()}", max_retries=1)
    assert caught.value.status is None and caught.value.retryable
    assert "connection failed" in caught.value.detail


async def test_timeout(up: Upstream) -> None:
    """A slow upstream times out after request.timeout_s."""
    up.fake.latency_s = 1.0
    with pytest.raises(ProviderError, match=r"timed out after 0\.2 s"):
        await up.complete(timeout_s=0.2, max_retries=0)
