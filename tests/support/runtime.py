"""Shared set-up for runtime tests: a fake providerA, a target server, an svc install."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.llm import DEFAULT_KEY, FakeLLM
from tests.support.accounts import bearer, create_key, signup
from tests.support.templates import publish_template


@dataclass
class Target:
    """A plain HTTP server agents call; it records what it receives."""

    received: list[dict[str, Any]] = field(default_factory=list)
    base: str = ""
    # While set, a request to a path under `/hold` is recorded, then left unanswered until released
    # (a slow upstream a test kills the caller in front of).
    hold: asyncio.Event = field(default_factory=asyncio.Event)

    def app(self) -> web.Application:
        async def anything(request: web.Request) -> web.Response:
            self.received.append(
                {
                    "method": request.method,
                    "path": request.path,
                    "query": dict(request.query),
                    "headers": dict(request.headers),
                    "body": await request.text(),
                }
            )
            if request.path.startswith("/hold"):
                await self.hold.wait()
            return web.json_response({"ok": True, "path": request.path})

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", anything)
        return app


async def start_llm(aiohttp_server: Any) -> tuple[FakeLLM, str]:
    fake = FakeLLM("providerA")
    server = await aiohttp_server(fake.app())
    return fake, fake.url(server)


async def start_target(aiohttp_server: Any) -> Target:
    target = Target()
    server = await aiohttp_server(target.app())
    target.base = str(server.make_url("")).rstrip("/")
    return target


def provider_settings(llm_url: str) -> dict[str, Any]:
    return {"providerA": {"api_key": DEFAULT_KEY, "base_url": llm_url}}


def member(key: str, **fields: Any) -> dict[str, Any]:
    return {
        "key": key,
        "name": key.title(),
        "model": "providerA:small",
        "prompt": f"You are {key}.",
        **fields,
    }


async def svc_install(
    client: Any, agents: list[dict[str, Any]], **definition: Any
) -> tuple[Any, dict[str, str], str]:
    """A user, a key and a published svc install of a team of these agents."""
    caller = await signup(client)
    key = await create_key(client, caller)
    team = {"version": "v1", "agents": agents, **definition}
    template = await publish_template(client, key, visibility="public", definition=team)
    response = await client.post(
        "/api/installs", json={"templateId": template["id"], "platform": "svc"}, headers=bearer(key)
    )
    assert response.status == 201, await response.text()
    return caller, bearer(key), (await response.json())["installId"]


async def managed_client(make_client: Any, aiohttp_server: Any, **overrides: Any) -> tuple[Any, FakeLLM]:
    """An app whose managed runtime calls a fake providerA, and that fake."""
    llm, url = await start_llm(aiohttp_server)
    client = await make_client(rate_limit_multiplier=None, providers=provider_settings(url), **overrides)
    return client, llm


async def webhook_token(client: Any, caller: Any, install_id: str | None = None) -> str:
    """The webhook token of the caller's managed install (the first, or `install_id`)."""
    mine = await (await client.get("/api/installs/mine", headers=caller.cookie)).json()
    item = mine[0] if install_id is None else next(i for i in mine if i["id"] == install_id)
    return str(item["webhookToken"])


async def callback_server(aiohttp_server: Any) -> tuple[list[dict[str, Any]], str]:
    """A callback receiver: what it got, and its URL."""
    received: list[dict[str, Any]] = []

    async def hook(request: web.Request) -> web.Response:
        received.append(json.loads(await request.read()))
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    server = await aiohttp_server(app)
    return received, str(server.make_url("/hook"))
