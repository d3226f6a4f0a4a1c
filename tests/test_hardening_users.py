"""Disabled and deleted accounts: their keys and sessions stop at once; installs and templates
are handled as docs/auth.md says."""

from __future__ import annotations

import pytest

from api.context import SERVICES
from svc.core import Conflict
from tests.support.accounts import app_store, bearer, create_key, signup
from tests.support.installs import managed_install as svc_install
from tests.support.installs import published_team
from tests.support.orgs import create_org


async def works(client, caller, key) -> tuple[int, int]:
    """Status of a key-authenticated and of a session-authenticated request."""
    by_key = await client.get("/api/auth/key-identity", headers=bearer(key))
    by_session = await client.get("/api/installs/mine", headers=caller.cookie)
    return by_key.status, by_session.status


async def test_disable_stops_keys_and_sessions_and_enable_restores_keys(client):
    caller = await signup(client)
    key = await create_key(client, caller)
    assert await works(client, caller, key) == (200, 200)
    admin = client.server.app[SERVICES].user_admin

    result = await admin.disable(caller.email)
    assert result["disabled"] is True and result["sessionsEnded"] == 1
    assert await works(client, caller, key) == (401, 401)
    answer = await client.get("/api/auth/key-identity", headers=bearer(key))
    assert await answer.json() == {"error": "Invalid API key"}
    created = await client.post("/api/templates", json={}, headers=bearer(key))
    assert created.status == 401
    login = await client.post("/api/auth/login", json={"email": caller.email, "password": caller.password})
    assert login.status == 401

    await admin.enable(caller.id)
    by_key = await client.get("/api/auth/key-identity", headers=bearer(key))
    assert by_key.status == 200, "keys survive a disable"
    login = await client.post("/api/auth/login", json={"email": caller.email, "password": caller.password})
    assert login.status == 200


async def test_delete_ends_credentials_cancels_installs_and_archives_templates(client):
    caller = await signup(client)
    key = await create_key(client, caller)
    template = await published_team(client, key)
    install_id = (await svc_install(client, key, template["id"]))["installId"]
    mine = await (await client.get("/api/installs/mine", headers=caller.cookie)).json()
    webhook_token = mine[0]["webhookToken"]
    services = client.server.app[SERVICES]

    result = await services.delete_user(caller.email)
    assert (result["deleted"], result["installsCancelled"], result["templatesArchived"]) == (True, 1, 1)
    assert await works(client, caller, key) == (401, 401)
    store = app_store(client)
    assert await store.api_keys.count_documents({"userId": caller.id}) == 0
    assert await store.sessions.count_documents({"userId": caller.id}) == 0
    user = await store.users.find_one({"_id": caller.id})
    assert user["email"].endswith("@deleted.invalid") and "passwordHash" not in user and "name" not in user
    install = await store.installs.find_one({"_id": install_id})
    assert install["status"] == "cancelled"
    fired = await client.post(f"/api/webhook/{webhook_token}", json={"inputText": "x"})
    assert fired.status == 404
    assert (await store["templates"].find_one({"_id": template["id"]}))["status"] == "archived"
    # The email is free again; the old account stays gone.
    again = await client.post(
        "/api/auth/signup", json={"email": caller.email, "password": "another pass 123"}
    )
    assert again.status == 201


async def test_an_org_owner_cannot_be_deleted(client):
    owner = await signup(client)
    await create_org(client, owner)
    with pytest.raises(Conflict):
        await client.server.app[SERVICES].delete_user(owner.id)
    assert (await client.get("/api/installs/mine", headers=owner.cookie)).status == 200
