"""The streaming authoring endpoints (SSE): generate, public generate, assist, test-chat."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

from api.context import services
from api.routing import RouteTable
from api.schemas import AuthoringStream
from api.sse import relay
from svc.authoring import AssistBody, GenerateBody, TestChatBody

routes = RouteTable()


async def streamed(
    request: web.Request, start: Callable[[], AsyncIterator[dict[str, Any]]]
) -> web.StreamResponse:
    """Validate and start (an unconfigured provider is a 503 before streaming: api/errors.py), then relay."""
    return await relay(request, start())


@routes.post("/api/templates/generate", auth="K", body=GenerateBody, response=AuthoringStream)
async def generate(request: web.Request, body: GenerateBody) -> web.StreamResponse:
    """Stream a team definition generated from a description."""
    return await streamed(request, lambda: services(request).authoring.generate(body, public=False))


@routes.post("/api/templates/generate/public", auth="P", body=GenerateBody, response=AuthoringStream)
async def generate_public(request: web.Request, body: GenerateBody) -> web.StreamResponse:
    """The same without a key, on the providerA small model, 5 per hour per IP."""
    return await streamed(request, lambda: services(request).authoring.generate(body, public=True))


@routes.post("/api/templates/assist", auth="K", body=AssistBody, response=AuthoringStream)
async def assist(request: web.Request, body: AssistBody) -> web.StreamResponse:
    """Stream an edit of a definition (APPLY) or an answer about it (DISCUSS); never saves."""
    return await streamed(request, lambda: services(request).authoring.assist(body))


@routes.post("/api/templates/test-chat", auth="K", body=TestChatBody, response=AuthoringStream)
async def test_chat(request: web.Request, body: TestChatBody) -> web.StreamResponse:
    """Stream the root agent's reply to the last message."""
    return await streamed(request, lambda: services(request).authoring.test_chat(body))
