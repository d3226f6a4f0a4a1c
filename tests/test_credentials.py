"""Every route accepts exactly the credentials of its auth code (the spec's legend)."""

from __future__ import annotations

import re

import pytest
from aiohttp import web

from api.context import ROUTE_TABLE, SERVICES, principal
from api.routing import AuthCode, Route
from svc.core import credential_digest
from tests.fakes.stripe import API_KEY, WEBHOOK_SECRET
from tests.support.accounts import app_store, bearer, create_key, own_origin, signup
from tests.support.billing import start_fake_stripe

APP_KEY = "app-key-for-tests-0123456789"
SCOPED_APP_KEY = "scoped-app-key-0123456789"


async def echo_principal(request: web.Request) -> web.Response:
    """Probe handler: shows who the guard let in."""
    caller = principal(request)
    return web.json_response({"via": caller.via, "installId": caller.install_id})


# The product has no I or T route yet (they arrive with installs and runs); these
# probes put the same guard in front of a handler so the walk covers every code.
PROBES = (
    Route("POST", "/api/test/probe/ingest", echo_principal, "I"),
    Route("POST", "/api/test/probe/webhook/{token}", echo_principal, "T"),
    Route("GET", "/api/test/probe/either", echo_principal, "K/S"),
)

ACCEPTS: dict[AuthCode, set[str]] = {
    "K": {"key"},
    "S": {"session"},
    "K/S": {"key", "session"},
    "AK": {"app_key"},
    "I": {"install_token"},
}


def concrete(path: str) -> str:
    """Fill path parameters with values that exist nowhere."""
    return re.sub(r"\{[^}]+\}", "does-not-exist", path)


@pytest.fixture
async def walk_client(make_client, aiohttp_server):
    # A payment provider is configured (the fake), so payment routes answer as in production
    # rather than 503 "not configured": the walk then refuses any 5xx for a valid credential.
    fake = await start_fake_stripe(aiohttp_server)
    return await make_client(
        extra_routes=PROBES,
        rate_limit_multiplier=None,
        stripe_api_key=API_KEY,
        stripe_api_base=fake.base_url,
        stripe_webhook_secret=WEBHOOK_SECRET,
        app_api_keys=({"key": APP_KEY}, {"key": SCOPED_APP_KEY, "install_id": "inst-1"}),
    )


@pytest.fixture
async def credentials(walk_client):
    caller = await signup(walk_client)
    key = await create_key(walk_client, caller)
    install_token = await walk_client.server.app[SERVICES].credentials.issue_install_token("inst-1")
    return {
        "key": bearer(key),
        "session": caller.cookie,
        "app_key": bearer(APP_KEY),
        "install_token": bearer(install_token),
    }


async def test_every_route_refuses_credentials_of_other_codes(walk_client, credentials):
    routes = [r for r in walk_client.server.app[ROUTE_TABLE] if r.auth not in ("P", "T")]
    assert {r.auth for r in routes} >= {"K", "S", "K/S", "AK", "I"}
    for route in routes:
        for kind, headers in credentials.items():
            response = await walk_client.request(
                route.method,
                concrete(route.path),
                headers=headers,
                json={} if route.method in ("POST", "PATCH") else None,
            )
            accepted = kind in ACCEPTS[route.auth] or (route.key_fallback and kind == "key")
            label = f"{route.method} {route.path} with {kind}"
            if accepted:
                # Let in: any answer but 401, and never a server error (a 500 is not "accepted").
                assert response.status != 401 and response.status < 500, (label, response.status)
            else:
                assert response.status == 401, label
        response = await walk_client.request(route.method, concrete(route.path))
        assert response.status == 401, f"{route.method} {route.path} with no credential"


async def test_public_routes_need_nothing(walk_client):
    for route in walk_client.server.app[ROUTE_TABLE]:
        if route.auth == "P" and route.method == "GET":
            response = await walk_client.get(concrete(route.path))
            assert response.status not in (401, 403), route.path


async def test_webhook_token_is_the_only_credential(walk_client, credentials, store):
    for headers in (*credentials.values(), {}):
        response = await walk_client.post("/api/test/probe/webhook/unknown-token", headers=headers)
        assert response.status == 404
        assert await response.json() == {"error": "Webhook token not found"}
    await app_store(walk_client).installs.insert_one(
        {"_id": "inst-9", "webhookTokenHash": credential_digest("good-token-123")}
    )
    response = await walk_client.post("/api/test/probe/webhook/good-token-123")
    assert response.status == 200
    assert await response.json() == {"via": "webhook_token", "installId": "inst-9"}


async def test_install_token_resolves_to_its_install(walk_client, credentials):
    response = await walk_client.post("/api/test/probe/ingest", headers=credentials["install_token"])
    assert await response.json() == {"via": "install_token", "installId": "inst-1"}
    response = await walk_client.post("/api/test/probe/ingest", headers=bearer("svc_install_" + "x" * 43))
    assert response.status == 401
    assert await response.json() == {"error": "Invalid install token"}


async def test_either_route_prefers_a_presented_key(walk_client, credentials):
    response = await walk_client.get("/api/test/probe/either", headers=credentials["key"])
    assert (await response.json())["via"] == "key"
    response = await walk_client.get("/api/test/probe/either", headers=credentials["session"])
    assert (await response.json())["via"] == "session"
    bad = {**credentials["session"], **bearer("svc_live_" + "0" * 32)}
    response = await walk_client.get("/api/test/probe/either", headers=bad)
    assert response.status == 401
    assert await response.json() == {"error": "Invalid API key"}
    response = await walk_client.get("/api/test/probe/either")
    assert await response.json() == {"error": "Not authenticated"}


async def test_invalid_api_key_text(walk_client):
    for token in ("svc_live_" + "a" * 32, "svc_live_short", "something-else"):
        response = await walk_client.get("/api/auth/key-identity", headers=bearer(token))
        assert response.status == 401
        assert await response.json() == {"error": "Invalid API key"}


async def test_whoami_with_app_keys(walk_client):
    response = await walk_client.get("/api/installs/whoami", headers=bearer(SCOPED_APP_KEY))
    assert response.status == 200
    assert await response.json() == {"installId": "inst-1"}
    response = await walk_client.get("/api/installs/whoami", headers=bearer(APP_KEY))
    assert response.status == 400
    body = await response.json()
    assert body["error"] == "key not linked to a pipeline install"
    assert body["hint"]
    response = await walk_client.get("/api/installs/whoami", headers=bearer("not-an-app-key"))
    assert response.status == 401
    assert await response.json() == {"error": "Invalid API key"}


async def test_session_route_refuses_foreign_origin_on_unsafe_methods(walk_client, credentials):
    headers = {**credentials["session"], "Origin": "https://evil.example"}
    response = await walk_client.post("/api/auth/keys", json={}, headers=headers)
    assert response.status == 403
    response = await walk_client.get("/api/auth/keys", headers=headers)
    assert response.status == 200
    same = {**credentials["session"], **own_origin(walk_client)}  # SVC_PUBLIC_URL unset: its own address
    response = await walk_client.post("/api/auth/keys", json={}, headers=same)
    assert response.status == 201
