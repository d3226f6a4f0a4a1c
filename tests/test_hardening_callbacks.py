"""Callbacks are signed with a per-install secret of their own, never the webhook token."""

from __future__ import annotations

import json

from aiohttp import web

from svc.runtime.callbacks import sign
from tests.support.accounts import app_store, signup
from tests.support.runtime import member, provider_settings, start_llm, svc_install
from tests.support.waiting import wait_until


async def make(make_client, aiohttp_server):
    """An app whose LLM provider is a local fake; the client and the fake."""
    llm, url = await start_llm(aiohttp_server)
    client = await make_client(rate_limit_multiplier=None, providers=provider_settings(url))
    return client, llm


async def test_the_callback_secret_is_separate_shown_once_and_rotatable(make_client, aiohttp_server, store):
    client, llm = await make(make_client, aiohttp_server)
    received: list[tuple[bytes, str | None]] = []

    async def hook(request: web.Request) -> web.Response:
        received.append((await request.read(), request.headers.get("Svc-Signature")))
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    server = await aiohttp_server(app)
    caller, _key, install_id = await svc_install(client, [member("lead")])
    mine = await (await client.get("/api/installs/mine", headers=caller.cookie)).json()
    token = mine[0]["webhookToken"]

    async def fire() -> tuple[bytes, str | None]:
        llm.script(text="done", input_tokens=1, output_tokens=1)
        count = len(received)
        answer = await client.post(
            f"/api/webhook/{token}", json={"inputText": "go", "callbackUrl": str(server.make_url("/hook"))}
        )
        assert answer.status == 200, await answer.text()
        assert await wait_until(lambda: len(received) > count, timeout_s=30)
        return received[-1]

    # Before a secret is made, callbacks are unsigned (never keyed by the token).
    _raw, signature = await fire()
    assert signature is None

    # Another tenant cannot make one for this install.
    stranger = await signup(client)
    refused = await client.post(f"/api/installs/{install_id}/callback-secret", headers=stranger.cookie)
    assert refused.status == 404

    first = await (
        await client.post(f"/api/installs/{install_id}/callback-secret", headers=caller.cookie)
    ).json()
    assert first["callbackSecret"].startswith("svc_cbs_") and first["callbackSecret"] != token
    raw, signature = await fire()
    stamp = int(signature.split(",")[0][2:])
    assert signature == sign(raw, first["callbackSecret"], stamp)
    assert json.loads(raw)["installId"] == install_id

    # Rotation: the new secret signs, the old one no longer does; only ciphertext is stored.
    second = await (
        await client.post(f"/api/installs/{install_id}/callback-secret", headers=caller.cookie)
    ).json()
    raw, signature = await fire()
    stamp = int(signature.split(",")[0][2:])
    assert signature == sign(raw, second["callbackSecret"], stamp)
    assert signature != sign(raw, first["callbackSecret"], stamp)
    doc = await app_store(client).installs.find_one({"_id": install_id})
    stored = json.dumps(doc, default=str)
    assert second["callbackSecret"] not in stored and first["callbackSecret"] not in stored
    listed = json.dumps(await (await client.get("/api/installs/mine", headers=caller.cookie)).json())
    assert second["callbackSecret"] not in listed
