"""Accounts over HTTP: sign up, keys, bearer headers, and the store a running app uses."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient

from api.app import STORE
from svc.core.store import Store


@dataclass
class Caller:
    """A signed-up user: the session cookie and helpers to send it, or a key."""

    id: str
    email: str
    password: str
    session: str

    @property
    def cookie(self) -> dict[str, str]:
        """Headers that carry the session cookie."""
        return {"Cookie": f"svc_session={self.session}"}


def own_origin(client: TestClient[web.Request, web.Application]) -> dict[str, str]:
    """The `Origin` header a browser on the test server's own address sends with a form."""
    return {"Origin": str(client.make_url("/")).rstrip("/")}


def bearer(token: str) -> dict[str, str]:
    """Headers that carry a bearer credential."""
    return {"Authorization": f"Bearer {token}"}


async def signup(
    client: TestClient[web.Request, web.Application],
    email: str | None = None,
    password: str = "correct horse battery",
    name: str = "Test User",
) -> Caller:
    """Sign a new user up over HTTP; the client's cookie jar is left empty."""
    email = email or f"user-{uuid.uuid4().hex[:10]}@example.com"
    body = {"email": email, "password": password, "name": name}
    response = await client.post("/api/auth/signup", json=body)
    assert response.status == 201, await response.text()
    user = await response.json()
    session = response.cookies["svc_session"].value
    client.session.cookie_jar.clear()
    return Caller(user["user"]["id"], email, password, session)


async def create_key(client: TestClient[web.Request, web.Application], caller: Caller, **body: Any) -> str:
    """A new personal key for the caller, over HTTP."""
    response = await client.post("/api/auth/keys", json=body, headers=caller.cookie)
    assert response.status == 201, await response.text()
    return str((await response.json())["key"])


def app_store(client: TestClient[web.Request, web.Application]) -> Store:
    """The store the running app uses."""
    return client.server.app[STORE]
