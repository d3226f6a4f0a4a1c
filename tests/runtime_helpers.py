"""Shared set-up for runtime tests: a fake providerA, a target server, an svc install."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.conftest import bearer, create_key, signup
from tests.fakes.llm import DEFAULT_KEY, FakeLLM
from tests.templates_helpers import publish_template


@dataclass
class Target:
    """A plain HTTP server agents call; it records what it receives."""

    received: list[dict[str, Any]] = field(default_factory=list)
    base: str = ""

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
