"""HTTP for every provider: pooled egress-guarded clients, retries with backoff, SSE reading."""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import httpx

from plugins import tracing
from plugins.builtin.providers.wire import (
    MAX_DELAY_S,
    Malformed,
    StreamState,
    Wire,
    _backoff,
    _redact,
    _retry_after,
    _upstream_message,
)
from plugins.egress import EgressDenied, egress_client
from plugins.types import (
    CompletionRequest,
    CompletionResponse,
    ProviderError,
    StreamChunk,
)

log = logging.getLogger(__name__)

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


def check(provider: str, request: CompletionRequest) -> None:
    """Refuse a request without a base URL or key before calling anything."""
    if not request.base_url:
        raise ProviderError(f"{provider} has no base URL configured")
    if not request.api_key:
        raise ProviderError(f"{provider} has no API key configured")


async def _send(
    provider: str, wire: Wire, client: httpx.AsyncClient, request: CompletionRequest, stream: bool
) -> tuple[httpx.Response, tracing.ChatAttempt]:
    """POST with retries of 429, 5xx and connection failures; a 2xx response (read unless streaming)
    and the `chat` span of its attempt, still open for the caller to end with the answer's tokens.
    Every attempt is a span of its own (docs/observability.md, "Traces")."""
    url = wire.url(request, stream)
    headers = {**wire.headers(request), "Accept": "text/event-stream" if stream else "application/json"}
    body = wire.body(request, stream)
    attempts = max(0, request.max_retries) + 1
    for attempt in range(attempts):
        delay = _backoff(attempt)
        call = tracing.chat_attempt(
            provider, request.model, request.upstream_model, attempt, request.max_tokens, request.base_url
        )
        call.prompt(request.system, request.messages, request.tools)
        try:
            with call.current():
                async with asyncio.timeout(None if stream else request.timeout_s):
                    response = await client.send(
                        client.build_request("POST", url, headers=headers, json=body), stream=True
                    )
                    if response.is_success and stream:
                        return response, call
                    try:
                        await response.aread()
                    finally:
                        await response.aclose()
        except EgressDenied as exc:
            call.failed("egress_denied")
            raise ProviderError(
                f"{provider} base URL is not reachable: {_redact(str(exc), request.api_key)}", None
            ) from None
        except (TimeoutError, httpx.TimeoutException):
            error = ProviderError(f"{provider} timed out after {request.timeout_s:g} s", None, retryable=True)
        except httpx.TransportError as exc:
            error = ProviderError(
                f"{provider} connection failed ({type(exc).__name__})", None, retryable=True
            )
        except BaseException as exc:  # cancelled: the attempt's span still ends
            call.failed(type(exc).__name__)
            raise
        else:
            status = response.status_code
            if response.is_success:
                return response, call
            error = ProviderError(
                f"{provider} answered HTTP {status}: {_upstream_message(response, request.api_key)}",
                status,
                retryable=status == 429 or status >= 500,
            )
            if not error.retryable:
                call.failed(str(status), error.detail)
                raise error
            waited = _retry_after(response)
            if waited is not None:
                delay = min(waited, MAX_DELAY_S)
        call.failed(str(error.status or "transport"), error.detail, retried=attempt < attempts - 1)
        if attempt == attempts - 1:
            raise error
        log.warning(
            "provider call retried",
            extra={
                "provider": provider,
                "status": error.status,
                "attempt": attempt + 1,
                "delayS": delay,
                "detail": error.detail,
            },
        )
        await asyncio.sleep(delay)
    raise AssertionError("unreachable")


async def _sse(response: httpx.Response) -> AsyncIterator[tuple[str, str]]:
    """(event, data) pairs of a server-sent event stream."""
    event, data = "", list[str]()
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


async def complete(provider: str, wire: Wire, request: CompletionRequest) -> CompletionResponse:
    """One whole call."""
    check(provider, request)
    response, call = await _send(provider, wire, _client(request), request, stream=False)
    try:
        answer = wire.parse(response.json(), request)
    except (ValueError, UnicodeDecodeError):
        call.failed("malformed_response")
        raise ProviderError(f"{provider} returned a malformed response: the body is not JSON", None) from None
    except Malformed as exc:
        call.failed("malformed_response")
        raise ProviderError(f"{provider} returned a malformed response: {exc}", None) from None
    call.succeeded(answer)
    return answer


async def chunks_of(
    provider: str, wire: Wire, request: CompletionRequest
) -> AsyncGenerator[StreamChunk, None]:
    """The streamed call: text chunks, then one done chunk with the whole answer."""
    response, call = await _send(provider, wire, _client(request), request, stream=True)
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
        raise ProviderError(
            f"{provider} stream stalled for {request.timeout_s:g} s", None, retryable=True
        ) from None
    except httpx.TransportError as exc:
        raise ProviderError(f"{provider} stream broke ({type(exc).__name__})", None, retryable=True) from None
    finally:
        await response.aclose()
        if not state.finished:
            call.failed("stream_incomplete")
    if not state.finished:
        raise ProviderError(f"{provider} stream ended before the answer was complete", None, retryable=True)
    try:
        done = state.response(provider)
    except Malformed as exc:
        call.failed("malformed_response")
        raise ProviderError(f"{provider} streamed a malformed answer: {exc}", None) from None
    call.succeeded(done)
    yield StreamChunk(done=True, response=done)


async def prepend(
    first: StreamChunk, rest: AsyncGenerator[StreamChunk, None]
) -> AsyncGenerator[StreamChunk, None]:
    """The first chunk, then the rest (closing the rest however iteration ends)."""
    try:
        yield first
        async for chunk in rest:
            yield chunk
    finally:
        await rest.aclose()
