"""GET and PATCH /api/auth/me: the User resource and the once-only handle (spec "Accounts and keys")."""

from __future__ import annotations

import pytest

from tests.support.accounts import signup

USER_FIELDS = {"id", "email", "name", "avatarUrl", "githubConnected", "handle", "handleLocked"}


async def get_me(client, caller):
    response = await client.get("/api/auth/me", headers=caller.cookie)
    assert response.status == 200, await response.text()
    return await response.json()


async def patch_handle(client, caller, body):
    return await client.patch("/api/auth/me", json=body, headers=caller.cookie)


async def test_me_returns_exactly_the_user_fields(client):
    caller = await signup(client, email="me@example.com", name="Me Myself")
    me = await get_me(client, caller)
    assert set(me) == USER_FIELDS
    assert me["id"] == caller.id
    assert me["email"] == "me@example.com"
    assert me["name"] == "Me Myself"
    assert me["avatarUrl"] is None
    assert me["githubConnected"] is False
    assert me["handle"] is None
    assert me["handleLocked"] is False


async def test_handle_is_normalised_and_locked(client, store):
    caller = await signup(client)
    response = await patch_handle(client, caller, {"handle": "  Hello World!_x-1 "})
    assert response.status == 200
    assert await response.json() == {"ok": True, "handle": "helloworld_x-1"}
    me = await get_me(client, caller)
    assert me["handle"] == "helloworld_x-1"
    assert me["handleLocked"] is True
    stored = await store.users.find_one({"_id": caller.id})
    assert stored["handle"] == "helloworld_x-1"
    assert stored["handleLocked"] is True


async def test_handle_is_truncated_to_24_after_stripping(client):
    caller = await signup(client)
    response = await patch_handle(client, caller, {"handle": "!@# ABCDEFGHIJKLMNOPQRSTUVWXYZ0123"})
    assert response.status == 200
    body = await response.json()
    assert body == {"ok": True, "handle": "abcdefghijklmnopqrstuvwx"}
    assert len(body["handle"]) == 24
    assert (await get_me(client, caller))["handle"] == "abcdefghijklmnopqrstuvwx"


async def test_handle_of_exactly_two_characters_is_accepted(client):
    caller = await signup(client)
    response = await patch_handle(client, caller, {"handle": "A!b"})
    assert response.status == 200
    assert await response.json() == {"ok": True, "handle": "ab"}


async def test_handle_can_only_be_changed_once(client):
    caller = await signup(client)
    assert (await patch_handle(client, caller, {"handle": "first"})).status == 200
    response = await patch_handle(client, caller, {"handle": "second"})
    assert response.status == 403
    assert await response.json() == {"error": "Handle can only be changed once"}
    me = await get_me(client, caller)
    assert me["handle"] == "first"
    assert me["handleLocked"] is True


@pytest.mark.parametrize("body", [{}, {"handle": ""}, {"handle": "   "}, {"handle": None}])
async def test_missing_or_blank_handle_is_required(client, store, body):
    caller = await signup(client)
    response = await patch_handle(client, caller, body)
    assert response.status == 400
    assert await response.json() == {"error": "Handle is required"}
    me = await get_me(client, caller)
    assert me["handle"] is None and me["handleLocked"] is False


@pytest.mark.parametrize("raw", ["A!", " x ", "!!!", "é"])
async def test_handle_under_two_characters_after_normalising_is_400(client, raw):
    caller = await signup(client)
    response = await patch_handle(client, caller, {"handle": raw})
    assert response.status == 400
    assert await response.json() == {"error": "Handle must be at least 2 characters"}
    me = await get_me(client, caller)
    assert me["handle"] is None and me["handleLocked"] is False


async def test_taken_handle_is_409_and_leaves_the_second_user_unlocked(client):
    first = await signup(client)
    second = await signup(client)
    assert (await patch_handle(client, first, {"handle": "taken"})).status == 200
    response = await patch_handle(client, second, {"handle": "Taken"})
    assert response.status == 409
    assert await response.json() == {"error": "That handle is already taken"}
    me = await get_me(client, second)
    assert me["handle"] is None
    assert me["handleLocked"] is False
    retry = await patch_handle(client, second, {"handle": "another"})
    assert retry.status == 200
    assert await retry.json() == {"ok": True, "handle": "another"}
    assert (await get_me(client, first))["handle"] == "taken"


async def test_wrong_type_names_the_handle_field(client):
    caller = await signup(client)
    response = await patch_handle(client, caller, {"handle": 5})
    assert response.status == 400
    assert (await response.json())["error"].startswith("handle:")
    me = await get_me(client, caller)
    assert me["handle"] is None and me["handleLocked"] is False


async def test_profile_needs_a_session(client, store):
    await signup(client)
    response = await client.get("/api/auth/me")
    assert response.status == 401
    assert await response.json() == {"error": "Not authenticated"}
    response = await client.patch("/api/auth/me", json={"handle": "nosession"})
    assert response.status == 401
    assert await response.json() == {"error": "Not authenticated"}
    assert await store.users.count_documents({"handle": "nosession"}) == 0
