"""Credential resolution (svc/identity/credentials.py) as tables, against the embedded database,
no app.

The routes' own tests walk every credential over HTTP; this is the fast test `make mutate`
runs against each resolver: what each credential resolves to, and each refusal's error and text
(docs/testing.md).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from config.settings import AppKey
from svc.core import Forbidden, NotFound, TTLCache, Unauthorized, credential_digest, is_install_token, utcnow
from svc.identity import Accounts, Credentials, Principal, require_unscoped
from svc.installs import InstallReads
from svc.orgs import OrgReads

PERSONAL = "svc_live_" + "a" * 32
ORG_KEY = "svc_live_" + "b" * 32
SCOPED = "svc_live_" + "c" * 32
GONE_USER = "svc_live_" + "d" * 32
UNKNOWN = "svc_live_" + "e" * 32
INSTALL_TOKEN = "svc_install_" + "t" * 40
WEBHOOK_128 = "w" * 128


@pytest.fixture
async def creds(store: Any) -> Credentials:
    """Users u-1 (live) and u-off (disabled); a personal, an org, a scoped key and one of u-off."""
    await store.users.insert_many(
        [
            {"_id": "u-1", "name": "Ada", "email": "ada@example.com"},
            {"_id": "u-off", "name": "Off", "disabled": True},
        ]
    )
    await store.api_keys.insert_many(
        [
            {"_id": "k-1", "keyHash": credential_digest(PERSONAL), "userId": "u-1", "linkedInstallId": "i-0"},
            {"_id": "k-org", "keyHash": credential_digest(ORG_KEY), "orgId": "o-1", "userId": None},
            {"_id": "k-scoped", "keyHash": credential_digest(SCOPED), "userId": "u-1", "installId": "i-1"},
            {"_id": "k-off", "keyHash": credential_digest(GONE_USER), "userId": "u-off"},
        ]
    )
    await store.install_tokens.insert_one({"_id": credential_digest(INSTALL_TOKEN), "installId": "i-1"})
    await store.installs.insert_many(
        [
            {"_id": "i-1", "webhookTokenHash": credential_digest("hook-1")},
            {"_id": "i-128", "webhookTokenHash": credential_digest(WEBHOOK_128)},
            {"_id": "i-129", "webhookTokenHash": credential_digest(WEBHOOK_128 + "w")},
        ]
    )
    app_keys = [
        AppKey(key=""),
        AppKey(key="app-one"),
        AppKey(key="app-two", install_id="i-2"),
        AppKey(key="app-two", install_id="i-3"),
    ]
    lookups = {"installs": InstallReads(store), "orgs": OrgReads(store)}
    return Credentials(store, Accounts(store), app_keys, TTLCache(), **lookups)


API_KEY_ROWS = [
    (PERSONAL, Principal("key", user_id="u-1", key_id="k-1", linked_install_id="i-0")),
    (ORG_KEY, Principal("key", org_id="o-1", key_id="k-org")),
    (SCOPED, Principal("key", user_id="u-1", key_id="k-scoped", install_id="i-1")),
    (GONE_USER, None),  # the key's user is disabled
    (UNKNOWN, None),
    ("svc_live_" + "A" * 32, None),  # not the shape: refused before any look-up
    (PERSONAL + "0", None),
    ("", None),
]


@pytest.mark.parametrize(("raw", "expected"), API_KEY_ROWS)
async def test_the_api_key_table(creds: Credentials, raw: str, expected: Principal | None) -> None:
    for _ in range(2):  # the second resolution comes from the cache, with the same answer
        if expected is None:
            with pytest.raises(Unauthorized) as refused:
                await creds.from_api_key(raw)
            assert str(refused.value) == "Invalid API key"
        else:
            assert await creds.from_api_key(raw) == expected


async def test_a_cached_key_is_refused_once_its_user_is_disabled(creds: Credentials, store: Any) -> None:
    assert (await creds.from_api_key(PERSONAL)).user_id == "u-1"
    await store.api_keys.delete_one({"_id": "k-1"})
    assert (await creds.from_api_key(PERSONAL)).key_id == "k-1"  # cached: no database read
    await store.users.update_one({"_id": "u-1"}, {"$set": {"disabled": True}})
    creds.accounts.forget_user("u-1")
    with pytest.raises(Unauthorized) as refused:
        await creds.from_api_key(PERSONAL)
    assert str(refused.value) == "Invalid API key"


async def test_sessions(creds: Credentials, store: Any) -> None:
    token = await creds.accounts.start_session("u-1")
    assert await creds.from_session(token) == Principal("session", user_id="u-1")
    with pytest.raises(Unauthorized, match=r"^Not authenticated$"):
        await creds.from_session("no-such-session")
    off = await creds.accounts.start_session("u-off")
    with pytest.raises(Unauthorized, match=r"^Not authenticated$"):
        await creds.from_session(off)
    old = "old-session"
    past = utcnow() - timedelta(minutes=1)
    await store.sessions.insert_one({"_id": credential_digest(old), "userId": "u-1", "expiresAt": past})
    with pytest.raises(Unauthorized, match=r"^Session expired$"):
        await creds.from_session(old)


APP_KEY_ROWS = [
    ("app-one", Principal("app_key")),
    ("app-two", Principal("app_key", install_id="i-2")),  # the first configured match wins
    ("", None),  # an empty configured key matches nothing
    ("app-three", None),
    ("app-on", None),
]


@pytest.mark.parametrize(("raw", "expected"), APP_KEY_ROWS)
async def test_the_app_key_table(creds: Credentials, raw: str, expected: Principal | None) -> None:
    if expected is None:
        with pytest.raises(Unauthorized) as refused:
            creds.from_app_key(raw)
        assert str(refused.value) == "Invalid API key"
    else:
        assert creds.from_app_key(raw) == expected


INSTALL_TOKEN_ROWS = [
    (INSTALL_TOKEN, Principal("install_token", install_id="i-1")),
    ("svc_install_" + "u" * 40, None),  # the shape, unknown
    ("svc_install_" + "t" * 31, None),  # too short to be one
    (INSTALL_TOKEN[4:], None),
    ("", None),
]


@pytest.mark.parametrize(("raw", "expected"), INSTALL_TOKEN_ROWS)
async def test_the_install_token_table(creds: Credentials, raw: str, expected: Principal | None) -> None:
    if expected is None:
        with pytest.raises(Unauthorized) as refused:
            await creds.from_install_token(raw)
        assert str(refused.value) == "Invalid install token"
    else:
        assert await creds.from_install_token(raw) == expected


WEBHOOK_ROWS = [
    ("hook-1", Principal("webhook_token", install_id="i-1")),
    (WEBHOOK_128, Principal("webhook_token", install_id="i-128")),  # 128 characters: the longest
    (WEBHOOK_128 + "w", None),  # stored, but longer than a token can be
    ("hook-2", None),
    ("", None),
]


@pytest.mark.parametrize(("raw", "expected"), WEBHOOK_ROWS)
async def test_the_webhook_token_table(creds: Credentials, raw: str, expected: Principal | None) -> None:
    if expected is None:
        with pytest.raises(NotFound) as refused:
            await creds.from_webhook_token(raw)
        assert str(refused.value) == "Webhook token not found"
    else:
        assert await creds.from_webhook_token(raw) == expected


async def test_install_tokens_are_hashed_and_revoked_per_install(creds: Credentials, store: Any) -> None:
    raw = await creds.issue_install_token("i-9")
    assert is_install_token(raw)
    stored = await store.install_tokens.find_one({"_id": credential_digest(raw)})
    assert stored is not None and stored["installId"] == "i-9" and stored["createdAt"] is not None
    assert await store.install_tokens.count_documents({"_id": raw}) == 0  # only the hash is kept
    assert await creds.from_install_token(raw) == Principal("install_token", install_id="i-9")
    await creds.revoke_install_tokens("i-9")
    with pytest.raises(Unauthorized):
        await creds.from_install_token(raw)
    assert await creds.from_install_token(INSTALL_TOKEN) == Principal("install_token", install_id="i-1")


async def test_only_a_personal_key_is_linked_to_its_install(creds: Credentials, store: Any) -> None:
    personal = await creds.from_api_key(PERSONAL)  # now cached
    await creds.link_key(personal, "i-new")
    assert (await creds.from_api_key(PERSONAL)).linked_install_id == "i-new"  # the cache was dropped
    assert (await creds.from_api_key(PERSONAL)).install_id is None  # linking restricts nothing
    org = await creds.from_api_key(ORG_KEY)
    await creds.link_key(org, "i-new")
    await creds.link_key(Principal("session", user_id="u-1", key_id="k-scoped"), "i-new")
    await creds.link_key(Principal("key", user_id="u-1"), "i-new")  # no key id: nothing to link
    await creds.link_key(Principal("key", user_id="u-1", key_id="k-missing"), "i-new")
    linked = {d["_id"]: d.get("linkedInstallId") async for d in store.api_keys.find({})}
    assert linked == {"k-1": "i-new", "k-org": None, "k-scoped": None, "k-off": None}


async def test_key_identity(creds: Credentials, store: Any) -> None:
    personal = await creds.from_api_key(PERSONAL)
    assert await creds.key_identity(personal) == {"userName": "Ada", "orgName": None, "orgSlug": None}
    now = utcnow()
    await store.orgs.insert_many(
        [
            {"_id": "o-1", "name": "First", "slug": "first"},
            {"_id": "o-2", "name": "Second", "slug": "second"},
        ]
    )
    await store.org_members.insert_many(
        [
            {"_id": "m-2", "orgId": "o-2", "userId": "u-1", "joinedAt": now},
            {"_id": "m-1", "orgId": "o-1", "userId": "u-1", "joinedAt": now - timedelta(days=1)},
            # another user's older membership is not this user's org
            {"_id": "m-x", "orgId": "o-2", "userId": "u-off", "joinedAt": now - timedelta(days=2)},
        ]
    )
    assert await creds.key_identity(personal) == {"userName": "Ada", "orgName": "First", "orgSlug": "first"}
    org = await creds.from_api_key(ORG_KEY)
    assert await creds.key_identity(org) == {"userName": None, "orgName": "First", "orgSlug": "first"}
    lost = Principal("key", org_id="o-gone", key_id="k-x")
    assert await creds.key_identity(lost) == {"userName": None, "orgName": None, "orgSlug": None}


def test_a_scoped_key_is_refused_where_an_unscoped_one_is_needed() -> None:
    with pytest.raises(Forbidden) as refused:
        require_unscoped(Principal("key", user_id="u-1", install_id="i-1"))
    assert str(refused.value) == (
        "This key is scoped to install i-1 and can act only on it; use an unscoped key"
    )
    require_unscoped(Principal("key", user_id="u-1"))
    require_unscoped(Principal("install_token", install_id="i-1"))
    require_unscoped(Principal("webhook_token", install_id="i-1"))
