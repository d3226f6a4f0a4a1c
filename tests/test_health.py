"""GET /api/health reports the database and Ray."""

from __future__ import annotations

from aiohttp.test_utils import TestClient, TestServer

from api.app import create_app
from svc.subprocesses.embedded_db import EmbeddedMongo


async def test_healthy(client):
    response = await client.get("/api/health")
    assert response.status == 200
    assert await response.json() == {"status": "ok", "checks": {"database": "ok", "ray": "ok"}}


# A database that does not answer is given up on after this long (SVC_DB_TIMEOUT_SECONDS, 10 s by
# default): the tests wait for one timeout per request, and for the app's shut-down.
DB_TIMEOUT_S = 2.0


async def test_database_down_is_503(tmp_path, make_settings, ray_session):
    server = EmbeddedMongo(tmp_path / "db")
    uri = await server.start()
    try:
        settings = make_settings(mongodb_uri=uri, db_timeout_seconds=DB_TIMEOUT_S)
        async with TestClient(TestServer(create_app(settings))) as client:
            await server.stop()
            response = await client.get("/api/health")
            assert response.status == 503
            body = await response.json()
            assert body["error"] == "Service degraded"
            assert body["checks"] == {"database": "unreachable", "ray": "ok"}
    finally:
        await server.stop()


async def test_other_routes_answer_503_while_the_database_is_down(tmp_path, make_settings, ray_session):
    server = EmbeddedMongo(tmp_path / "db")
    uri = await server.start()
    try:
        settings = make_settings(mongodb_uri=uri, db_timeout_seconds=DB_TIMEOUT_S)
        async with TestClient(TestServer(create_app(settings))) as client:
            await server.stop()
            response = await client.get("/api/auth/me")
            assert response.status == 503
            assert (await response.json())["error"] == "Database unavailable"
    finally:
        await server.stop()
