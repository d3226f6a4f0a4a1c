"""Every failure is a JSON {"error": ...} with the right status; nothing internal leaks."""

from __future__ import annotations

import json

import pytest
from aiohttp import web
from pymongo.errors import ConnectionFailure

from api.errors import known_error
from api.routing import Route
from plugins.manager import PluginError
from plugins.types import PlatformError, ProviderError
from svc.core import Conflict, RuntimeFailure
from svc.runtime import ProviderNotConfigured
from tests.support.accounts import signup


async def explode(request: web.Request) -> web.Response:
    """A handler that fails the way a bug would."""
    raise RuntimeError("database password is hunter2")


async def test_unknown_path_is_404_json(client):
    response = await client.get("/api/does-not-exist")
    assert response.status == 404
    assert await response.json() == {"error": "Not found"}


async def test_wrong_method_is_405_json_with_allow(client):
    response = await client.delete("/api/auth/me")
    assert response.status == 405
    assert await response.json() == {"error": "Method not allowed"}
    assert "GET" in response.headers["Allow"]


async def test_malformed_json_is_400(client):
    headers = {"Content-Type": "application/json"}
    response = await client.post("/api/auth/signup", data=b"{not json", headers=headers)
    assert response.status == 400
    assert await response.json() == {"error": "Malformed JSON body"}


async def test_body_must_be_an_object(client):
    response = await client.post("/api/auth/signup", json=["a", "b"])
    assert response.status == 400
    assert (await response.json())["error"] == "Request body must be a JSON object"


async def test_wrong_type_names_the_field(client):
    response = await client.post("/api/auth/signup", json={"email": 5, "password": "long enough"})
    assert response.status == 400
    assert (await response.json())["error"].startswith("email:")


async def test_missing_field_names_the_field(client):
    response = await client.post("/api/auth/signup", json={"password": "long enough"})
    assert response.status == 400
    assert (await response.json())["error"] == "email: Field required"


async def test_failed_request_writes_nothing(client, store):
    response = await client.post("/api/auth/signup", json={"email": "a@example.com", "password": "short"})
    assert response.status == 400
    assert "password" in (await response.json())["error"]
    assert await store.users.count_documents({}) == 0


async def test_oversized_body_is_413(make_client):
    client = await make_client(max_body_bytes=1024)
    response = await client.post("/api/auth/signup", data=b"{" + b" " * 4096 + b"}")
    assert response.status == 413
    assert await response.json() == {"error": "Request body too large"}


async def test_unexpected_exception_is_500_with_request_id_and_no_detail(make_client, caplog):
    client = await make_client(extra_routes=(Route("GET", "/api/test/explode", explode, "P"),))
    response = await client.get("/api/test/explode")
    assert response.status == 500
    body = await response.json()
    assert body["error"] == "Internal server error"
    assert body["requestId"] == response.headers["X-Request-Id"]
    assert "hunter2" not in await response.text()
    logged = [r for r in caplog.records if r.name == "svc.errors"]
    assert logged and logged[0].exc_info is not None


async def test_request_id_is_echoed_when_sane(client):
    response = await client.get("/api/nowhere", headers={"X-Request-Id": "abc-123-xyz"})
    assert response.headers["X-Request-Id"] == "abc-123-xyz"
    response = await client.get("/api/nowhere", headers={"X-Request-Id": "bad id with spaces"})
    assert response.headers["X-Request-Id"] != "bad id with spaces"


async def test_extra_fields_are_ignored_not_written(client, store):
    response = await client.post(
        "/api/auth/signup",
        json={"email": "x@example.com", "password": "long enough pw", "handleLocked": True, "plan": "pro"},
    )
    assert response.status == 201
    doc = await store.users.find_one({"email": "x@example.com"})
    assert doc["handleLocked"] is False
    assert "plan" not in doc


async def test_errors_never_include_stack_traces(client):
    caller = await signup(client)
    response = await client.patch("/api/auth/me", data=b"[1,", headers=caller.cookie)
    assert response.status == 400
    assert "Traceback" not in await response.text()


async def test_lone_surrogates_and_deep_nesting_are_400(client, store):
    for raw in (b'{"email": "\\ud800@x.com", "password": "long enough"}', b"[" * 100_000):
        response = await client.post(
            "/api/auth/signup", data=raw, headers={"Content-Type": "application/json"}
        )
        assert response.status == 400
        assert await response.json() == {"error": "Malformed JSON body"}
    assert await store.users.count_documents({}) == 0


@pytest.mark.parametrize(
    ("error", "status", "message"),
    [
        (ProviderNotConfigured("providerA is not configured"), 503, "providerA is not configured"),
        (ProviderError("providerB answered HTTP 500", 500), 502, "providerB answered HTTP 500"),
        (PlatformError("orchB answered 401", 401), 502, "orchB answered 401"),
        (RuntimeFailure("The install's worker could not be started"), 503, "could not be started"),
        (PluginError("no plugin answered svc_provision"), 503, "A platform driver is unavailable"),
        (ConnectionFailure("refused"), 503, "Database unavailable"),
        (Conflict("Install is already cancelled"), 409, "Install is already cancelled"),
    ],
)
def test_one_table_maps_every_expected_error(error: Exception, status: int, message: str) -> None:
    """Domain, plugin and runtime errors reach HTTP through api/errors.py alone; 503s say when to retry."""
    response = known_error(error)
    assert response is not None and response.status == status
    assert message in json.loads(response.text)["error"]
    assert ("Retry-After" in response.headers) == (status == 503)


def test_a_bug_is_not_an_expected_error() -> None:
    assert known_error(KeyError("x")) is None
