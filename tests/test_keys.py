"""Personal API keys: create, list, revoke, use as a bearer (spec "Accounts and keys", "Authentication")."""

from __future__ import annotations

import asyncio
import hashlib
import re
from datetime import datetime, timedelta

import pytest
import time_machine

from svc.core.clock import utcnow
from tests.support.accounts import bearer, create_key, signup

KEY_PATTERN = re.compile(r"svc_live_[0-9a-f]{32}")
ISO_Z = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z")
CREATED_FIELDS = {"id", "key", "label", "installId", "createdAt", "note"}
LISTED_FIELDS = {"id", "key", "label", "createdAt"}


async def post_key(client, caller, **body):
    return await client.post("/api/auth/keys", json=body, headers=caller.cookie)


async def list_keys(client, caller):
    response = await client.get("/api/auth/keys", headers=caller.cookie)
    assert response.status == 200, await response.text()
    body = await response.json()
    assert set(body) == {"keys"}
    return body["keys"]


async def identity(client, key):
    return await client.get("/api/auth/key-identity", headers=bearer(key))


def strings_in(value):
    """Every string anywhere inside a document."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings_in(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings_in(item)


async def test_create_key_returns_the_spec_fields(client, store):
    caller = await signup(client)
    response = await post_key(client, caller, label="ci runner")
    assert response.status == 201
    body = await response.json()
    assert set(body) == CREATED_FIELDS
    assert KEY_PATTERN.fullmatch(body["key"])
    assert body["label"] == "ci runner"
    assert body["installId"] is None
    assert isinstance(body["note"], str) and body["note"]
    assert ISO_Z.fullmatch(body["createdAt"])
    created = datetime.fromisoformat(body["createdAt"].replace("Z", "+00:00"))
    stored = await store.api_keys.find_one({"_id": body["id"]})
    assert stored is not None
    assert stored["userId"] == caller.id
    assert stored["createdAt"].replace(tzinfo=None) == created.replace(tzinfo=None)


async def test_create_key_with_an_empty_body(client):
    caller = await signup(client)
    response = await client.post("/api/auth/keys", headers=caller.cookie)
    assert response.status == 201
    body = await response.json()
    assert body["label"] is None
    assert KEY_PATTERN.fullmatch(body["key"])
    response = await client.post("/api/auth/keys", json={}, headers=caller.cookie)
    assert response.status == 201
    assert (await response.json())["label"] is None


async def test_list_is_newest_first_with_full_key_values(client):
    caller = await signup(client)
    created = []
    start = utcnow()
    for n, label in enumerate(("one", "two", "three")):
        # A second apart on the service's clock: the order is the rule under test, not the machine's speed.
        with time_machine.travel(start + timedelta(seconds=n), tick=False):
            response = await post_key(client, caller, label=label)
        assert response.status == 201
        created.append(await response.json())
    listed = await list_keys(client, caller)
    assert [k["id"] for k in listed] == [c["id"] for c in reversed(created)]
    for item, original in zip(listed, reversed(created), strict=True):
        assert LISTED_FIELDS <= set(item)
        assert item["key"] == original["key"]
        assert item["label"] == original["label"]
        assert item["createdAt"] == original["createdAt"]


async def test_database_never_holds_the_raw_key(client, store):
    caller = await signup(client)
    key = await create_key(client, caller, label="secret")
    docs = await store.api_keys.find({}).to_list(None)
    assert len(docs) == 1
    doc = docs[0]
    hex_part = key.removeprefix("svc_live_")
    for value in strings_in(doc):
        assert value != key
        assert hex_part not in value
    assert doc["keyHash"] == hashlib.sha256(key.encode()).hexdigest()


async def test_key_works_as_a_bearer_on_key_identity(client):
    caller = await signup(client, name="Key Owner")
    key = await create_key(client, caller)
    response = await identity(client, key)
    assert response.status == 200
    assert await response.json() == {"userName": "Key Owner", "orgName": None, "orgSlug": None}


async def test_deleted_key_is_refused(client, store):
    caller = await signup(client)
    response = await post_key(client, caller)
    created = await response.json()
    assert (await identity(client, created["key"])).status == 200
    deleted = await client.delete(f"/api/auth/keys/{created['id']}", headers=caller.cookie)
    assert deleted.status == 204
    assert await deleted.read() == b""
    after = await identity(client, created["key"])
    assert after.status == 401
    assert await after.json() == {"error": "Invalid API key"}
    assert await list_keys(client, caller) == []
    assert await store.api_keys.count_documents({}) == 0


async def test_deleting_another_users_key_is_forbidden(client, store):
    owner = await signup(client)
    other = await signup(client)
    response = await post_key(client, owner, label="mine")
    created = await response.json()
    attempt = await client.delete(f"/api/auth/keys/{created['id']}", headers=other.cookie)
    assert attempt.status == 403
    assert await attempt.json() == {"error": "Forbidden"}
    assert (await identity(client, created["key"])).status == 200
    assert [k["id"] for k in await list_keys(client, owner)] == [created["id"]]
    assert await store.api_keys.count_documents({"_id": created["id"]}) == 1


async def test_deleting_an_unknown_key_is_404(client):
    caller = await signup(client)
    await create_key(client, caller)
    response = await client.delete("/api/auth/keys/does-not-exist", headers=caller.cookie)
    assert response.status == 404
    assert await response.json() == {"error": "Key not found"}
    assert len(await list_keys(client, caller)) == 1


@pytest.mark.parametrize(
    "make_header",
    [
        lambda key: "Bearer svc_live_xyz",
        lambda key: "Bearer svc_live_" + "0" * 32,
        lambda key: "Bearer " + key[:-1],
        lambda key: "Bearer " + key.upper(),
        lambda key: "Bearer",
        lambda key: "Basic " + key,
        lambda key: key,
    ],
    ids=["short", "unknown", "truncated", "uppercase", "bearer-empty", "basic-scheme", "no-scheme"],
)
async def test_malformed_or_unknown_bearer_is_401(client, make_header):
    caller = await signup(client)
    key = await create_key(client, caller)
    assert (await identity(client, key)).status == 200
    response = await client.get("/api/auth/key-identity", headers={"Authorization": make_header(key)})
    assert response.status == 401
    body = await response.json()
    assert set(body) == {"error"} and isinstance(body["error"], str)


@pytest.mark.parametrize("token", ["svc_live_xyz", "svc_live_" + "0" * 32])
async def test_invalid_key_says_invalid_api_key(client, token):
    response = await identity(client, token)
    assert response.status == 401
    assert await response.json() == {"error": "Invalid API key"}


async def test_key_identity_ignores_a_session_cookie(client):
    caller = await signup(client)
    response = await client.get("/api/auth/key-identity", headers=caller.cookie)
    assert response.status == 401


async def test_key_endpoints_need_a_session(client, store):
    caller = await signup(client)
    key = await create_key(client, caller)
    created = (await list_keys(client, caller))[0]
    for method, path in (
        ("GET", "/api/auth/keys"),
        ("POST", "/api/auth/keys"),
        ("DELETE", f"/api/auth/keys/{created['id']}"),
    ):
        response = await client.request(method, path, headers=bearer(key))
        assert response.status == 401, (method, path)
        assert await response.json() == {"error": "Not authenticated"}
    assert await store.api_keys.count_documents({}) == 1


async def test_keys_are_listed_only_for_their_owner(client):
    alice = await signup(client)
    bob = await signup(client)
    alice_key = await create_key(client, alice, label="alice")
    bob_key = await create_key(client, bob, label="bob")
    alice_list = await list_keys(client, alice)
    bob_list = await list_keys(client, bob)
    assert [k["key"] for k in alice_list] == [alice_key]
    assert [k["key"] for k in bob_list] == [bob_key]
    assert not {k["id"] for k in alice_list} & {k["id"] for k in bob_list}


async def test_scope_to_an_unknown_install_is_404(client, store):
    caller = await signup(client)
    response = await post_key(client, caller, installId="no-such-install")
    assert response.status == 404
    assert await response.json() == {"error": "Install not found"}
    assert await store.api_keys.count_documents({}) == 0


async def test_scope_to_someone_elses_install_is_404(client, store):
    owner = await signup(client)
    other = await signup(client)
    await store.installs.insert_one({"_id": "inst-owned", "deployedBy": owner.id})
    response = await post_key(client, other, installId="inst-owned")
    assert response.status == 404
    assert await response.json() == {"error": "Install not found"}
    response = await post_key(client, owner, installId="inst-owned", label="scoped")
    assert response.status == 201
    body = await response.json()
    assert body["installId"] == "inst-owned"
    stored = await store.api_keys.find_one({"_id": body["id"]})
    assert stored["installId"] == "inst-owned"
    assert (await identity(client, body["key"])).status == 200


async def test_label_longer_than_100_is_400(client, store):
    caller = await signup(client)
    response = await post_key(client, caller, label="x" * 101)
    assert response.status == 400
    assert (await response.json())["error"].startswith("label:")
    assert await store.api_keys.count_documents({}) == 0
    response = await post_key(client, caller, label="x" * 100)
    assert response.status == 201
    assert (await response.json())["label"] == "x" * 100


async def test_wrong_label_type_is_400(client, store):
    caller = await signup(client)
    response = await post_key(client, caller, label=5)
    assert response.status == 400
    assert (await response.json())["error"].startswith("label:")
    assert await store.api_keys.count_documents({}) == 0


async def test_the_101st_key_is_409(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    caller = await signup(client)
    created = []
    for _ in range(5):
        responses = await asyncio.gather(*(post_key(client, caller) for _ in range(20)))
        assert [r.status for r in responses] == [201] * 20
        created.extend([await r.json() for r in responses])
    assert len({c["key"] for c in created}) == 100
    response = await post_key(client, caller, label="one too many")
    assert response.status == 409
    assert isinstance((await response.json())["error"], str)
    assert await store.api_keys.count_documents({"userId": caller.id}) == 100
    assert len(await list_keys(client, caller)) == 100
    deleted = await client.delete(f"/api/auth/keys/{created[0]['id']}", headers=caller.cookie)
    assert deleted.status == 204
    assert (await post_key(client, caller, label="room again")).status == 201


async def test_the_key_cap_holds_under_concurrent_creation(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    caller = await signup(client)
    for batch in (20, 20, 20, 20, 19):
        responses = await asyncio.gather(*(post_key(client, caller) for _ in range(batch)))
        assert [r.status for r in responses] == [201] * batch
    responses = await asyncio.gather(*(post_key(client, caller) for _ in range(20)))
    statuses = sorted(r.status for r in responses)
    assert statuses == [201] + [409] * 19
    assert await store.api_keys.count_documents({"userId": caller.id}) == 100
