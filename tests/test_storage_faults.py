"""Storage faults against real `svc serve` processes: a frozen database, a killed API.

The embedded database is frozen with SIGSTOP (its pid is in the data directory's state
file) and always resumed with SIGCONT. Each request's client timeout only detects a hang
(several times the configured bound); nothing here asserts a speed.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from pathlib import Path
from typing import Any

import aiohttp

from svc.subprocesses.embedded_db import STATE_FILE
from svc.subprocesses.process_finder import alive
from tests.support.serve import Service
from tests.support.waiting import wait_for

DB_TIMEOUT_S = 2.0
# A request that has not answered by then hangs: the bound plus generous room for a busy machine.
HANG_S = DB_TIMEOUT_S * 3 + 20
PASSWORD = "correct horse battery"


async def call(origin: str, method: str, path: str, **kwargs: Any) -> tuple[int, dict[str, Any], Any]:
    """(status, JSON body, cookies) of one request; a hang fails with a timeout."""
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HANG_S)) as session,
        session.request(method, origin + path, **kwargs) as response,
    ):
        return response.status, await response.json(content_type=None), response.cookies


async def sign_up(origin: str) -> tuple[str, str]:
    """A new account over HTTP: (email, session cookie)."""
    email = f"user-{uuid.uuid4().hex[:10]}@example.com"
    body = {"email": email, "password": PASSWORD, "name": "Test User"}
    status, answer, cookies = await call(origin, "POST", "/api/auth/signup", json=body)
    assert status == 201, answer
    return email, cookies["svc_session"].value


async def sign_in(origin: str, email: str) -> tuple[int, dict[str, Any]]:
    status, answer, _ = await call(
        origin, "POST", "/api/auth/login", json={"email": email, "password": PASSWORD}
    )
    return status, answer


def database_pid(data_dir: Path) -> int:
    """The embedded database's pid, from its state file."""
    return int(json.loads((data_dir / STATE_FILE).read_text())["pid"])


def service(data_dir: Path, secret_key: str) -> Service:
    """A `svc serve` on the data directory's embedded database, joining the session's Ray."""
    return Service(
        data_dir,
        secret_key,
        local_ray=False,
        SVC_DB_TIMEOUT_SECONDS=str(DB_TIMEOUT_S),
        SVC_RATE_LIMITS="off",
    )


async def test_a_frozen_database_answers_503_on_every_route_then_recovers(tmp_path, secret_key, ray_session):
    data_dir = tmp_path / "data"
    api = service(data_dir, secret_key)
    try:
        origin = await api.start()
        email, session = await sign_up(origin)
        status, answer, _ = await call(
            origin, "POST", "/api/auth/keys", json={}, headers={"Cookie": f"svc_session={session}"}
        )
        assert status == 201, answer
        key = {"Authorization": f"Bearer {answer['key']}"}
        cookie = {"Cookie": f"svc_session={session}"}
        pid = database_pid(data_dir)

        os.kill(pid, signal.SIGSTOP)
        try:
            status, answer, _ = await call(origin, "GET", "/api/health")
            assert status == 503 and answer["checks"]["database"] == "unreachable", answer
            unavailable = {"error": "Database unavailable"}
            assert await sign_in(origin, email) == (503, unavailable)
            status, answer, _ = await call(origin, "GET", "/api/installs/mine", headers=cookie)
            assert (status, answer) == (503, unavailable)
            status, answer, _ = await call(
                origin, "POST", "/api/installs/any/run", json={"task": "hi"}, headers=key
            )
            assert (status, answer) == (503, unavailable)
        finally:
            os.kill(pid, signal.SIGCONT)

        async def healthy() -> bool:
            return (await call(origin, "GET", "/api/health"))[0] == 200

        assert await wait_for(healthy, HANG_S), "the service recovers once the database answers"
        assert (await sign_in(origin, email))[0] == 200
        status, answer, _ = await call(origin, "GET", "/api/installs/mine", headers=cookie)
        assert status == 200, answer
    finally:
        api.kill()


async def test_killing_the_api_that_started_the_database_leaves_it_to_the_others(
    tmp_path, secret_key, ray_session
):
    data_dir = tmp_path / "data"
    first, second, third = (service(data_dir, secret_key) for _ in range(3))
    try:
        first_origin = await first.start()
        second_origin = await second.start()
        pid = database_pid(data_dir)
        email, _ = await sign_up(first_origin)

        assert await first.stop(signal.SIGKILL) == -signal.SIGKILL
        assert (await sign_in(second_origin, email))[0] == 200, "the second API keeps answering"
        await sign_up(second_origin)  # and writing
        assert alive(pid) and database_pid(data_dir) == pid

        third_origin = await third.start()
        assert (await sign_in(third_origin, email))[0] == 200, "a later API finds the running database"

        assert await second.stop(signal.SIGTERM) == 0
        assert (await sign_in(third_origin, email))[0] == 200
        assert await third.stop(signal.SIGTERM) == 0
        assert await first.leftovers() == [], "the last one out stopped the database"
        assert not alive(pid)
    finally:
        for api in (first, second, third):
            api.kill()


async def test_a_database_that_died_under_its_users_is_started_again_on_its_port(
    tmp_path, secret_key, ray_session
):
    data_dir = tmp_path / "data"
    api = service(data_dir, secret_key)
    try:
        origin = await api.start()
        email, _ = await sign_up(origin)
        state = json.loads((data_dir / STATE_FILE).read_text())
        os.kill(state["pid"], signal.SIGKILL)  # a crash of the database itself

        async def answering() -> bool:
            return (await sign_in(origin, email))[0] == 200

        assert await wait_for(answering, HANG_S), "the API starts the database again and reconnects"
        revived = json.loads((data_dir / STATE_FILE).read_text())
        assert revived["pid"] != state["pid"] and alive(revived["pid"])
        assert revived["port"] == state["port"], "on the same port: addresses handed out earlier still work"
    finally:
        api.kill()
