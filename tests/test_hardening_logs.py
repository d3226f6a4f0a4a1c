"""Credentials carried in paths (webhook and invitation tokens) never reach a log line."""

from __future__ import annotations

import json
import logging
import secrets

import pytest
from aiohttp import web

from api.logs import JsonFormatter, PathRedactor
from api.routing import RouteTable
from tests.support.accounts import signup


def log_text(caplog: pytest.LogCaptureFixture) -> str:
    """Every captured record as the JSON line the service would write.

    aiohttp's own access logger is left out: the test server turns it on, while
    `svc serve` runs with `access_log=None` and `configure_logging` disables it.
    """
    formatter = JsonFormatter()
    return "\n".join(formatter.format(r) for r in caplog.records if r.name != "aiohttp.access")


def access_paths(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The paths of the access log lines."""
    return [record.getMessage().split(" ")[1] for record in caplog.records if record.name == "svc.access"]


def test_the_redactor_rewrites_every_spelling_of_a_credential_path():
    redact = PathRedactor(["/api/webhook/{token}", "/api/invitations/{token}/accept", "/api/installs/{id}"])
    assert redact("/api/webhook/abc") == "/api/webhook/{token}"
    assert redact("/api/webhook/abc/more") == "/api/webhook/{token}/more"
    assert redact("//api/webhook/abc") == "//api/webhook/{token}"
    assert redact("/api/invitations/abc/accept") == "/api/invitations/{token}/accept"
    assert redact("/api/installs/abc") == "/api/installs/abc"


async def test_webhook_and_invitation_tokens_are_not_in_the_access_log(client, caplog):
    caplog.set_level(logging.DEBUG)
    caller = await signup(client)
    webhook_token = secrets.token_urlsafe(24)
    invitation_token = secrets.token_urlsafe(24)
    stray_token = secrets.token_urlsafe(24)
    await client.post(f"/api/webhook/{webhook_token}", json={"task": "hello"})
    await client.post(f"/api/invitations/{invitation_token}/accept", headers=caller.cookie)
    await client.get(f"/api/webhook/{stray_token}/extra")
    await client.get(f"/invitations/{stray_token}")
    text = log_text(caplog)
    for token in (webhook_token, invitation_token, stray_token):
        assert token not in text
    paths = access_paths(caplog)
    assert "/api/webhook/{token}" in paths
    assert "/api/invitations/{token}/accept" in paths
    assert "/api/webhook/{token}/extra" in paths
    assert "/invitations/{token}" in paths


async def test_an_unhandled_error_logs_no_token_from_the_path(make_client, caplog):
    boom = RouteTable()

    @boom.get("/api/test-boom/{token}", auth="P")
    async def explode(request: web.Request) -> web.Response:
        """Fail with the credential in the exception message."""
        raise RuntimeError(f"cannot handle {request.match_info['token']}")

    client = await make_client(extra_routes=tuple(boom))
    caplog.set_level(logging.DEBUG)
    token = secrets.token_urlsafe(24)
    response = await client.get(f"/api/test-boom/{token}")
    assert response.status == 500
    assert token not in await response.text()
    text = log_text(caplog)
    assert token not in text
    errors = [json.loads(line) for line in text.splitlines() if '"svc.errors"' in line]
    assert errors and "cannot handle {token}" in errors[0]["exc"]
