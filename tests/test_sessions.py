"""Sign-up, login, logout and the session cookie (design "Sessions"; spec "Authentication", "Errors")."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.support.accounts import bearer, create_key, signup

USER_FIELDS = {"id", "email", "name", "avatarUrl", "githubConnected", "handle", "handleLocked"}
PASSWORD = "correct horse battery"
SESSION_SECONDS = 30 * 24 * 3600
CLI_TIMEOUT_S = 120


def session_cookie_attributes(response) -> dict[str, str | bool]:
    """The attributes of the `svc_session` Set-Cookie header, names lowercased; the value under ''."""
    headers = [h for h in response.headers.getall("Set-Cookie", []) if h.startswith("svc_session=")]
    assert len(headers) == 1, response.headers.getall("Set-Cookie", [])
    first, *rest = (part.strip() for part in headers[0].split(";"))
    attributes: dict[str, str | bool] = {"": first.partition("=")[2]}
    for part in rest:
        name, sep, value = part.partition("=")
        attributes[name.strip().lower()] = value.strip() if sep else True
    return attributes


async def post_signup(client, email, password=PASSWORD, name="Ada Lovelace"):
    """POST /api/auth/signup and leave the client's cookie jar empty."""
    body = {"email": email, "password": password, "name": name}
    response = await client.post("/api/auth/signup", json=body)
    client.session.cookie_jar.clear()
    return response


async def post_login(client, email, password):
    """POST /api/auth/login and leave the client's cookie jar empty."""
    response = await client.post("/api/auth/login", json={"email": email, "password": password})
    client.session.cookie_jar.clear()
    return response


def cookie(token: str) -> dict[str, str]:
    return {"Cookie": f"svc_session={token}"}


async def test_signup_returns_the_user_and_no_password(client, store):
    response = await post_signup(client, "ada@example.com")
    assert response.status == 201
    text = await response.text()
    body = json.loads(text)
    assert set(body) == {"user"}
    user = body["user"]
    assert set(user) == USER_FIELDS
    assert user["email"] == "ada@example.com"
    assert user["name"] == "Ada Lovelace"
    assert user["avatarUrl"] is None
    assert user["githubConnected"] is False
    assert user["handle"] is None
    assert user["handleLocked"] is False
    assert isinstance(user["id"], str) and user["id"]
    assert "password" not in text.lower()
    assert "scrypt" not in text
    assert PASSWORD not in text
    stored = await store.users.find_one({"email": "ada@example.com"})
    assert stored is not None and stored["_id"] == user["id"]


async def test_signup_cookie_is_httponly_lax_root_and_not_secure_by_default(client):
    response = await post_signup(client, "ada@example.com")
    assert response.status == 201
    attributes = session_cookie_attributes(response)
    assert attributes[""]
    assert attributes.get("httponly") is True
    assert str(attributes.get("samesite")).lower() == "lax"
    assert attributes.get("path") == "/"
    assert "secure" not in attributes
    assert attributes.get("max-age") == str(SESSION_SECONDS)
    me = await client.get("/api/auth/me", headers=cookie(str(attributes[""])))
    assert me.status == 200
    assert (await me.json())["email"] == "ada@example.com"


async def test_cookie_is_secure_when_the_public_url_is_https(make_client):
    client = await make_client(public_url="https://svc.example.com")
    response = await post_signup(client, "ada@example.com")
    assert response.status == 201
    attributes = session_cookie_attributes(response)
    assert attributes.get("secure") is True
    assert attributes.get("httponly") is True
    assert str(attributes.get("samesite")).lower() == "lax"
    login = await post_login(client, "ada@example.com", PASSWORD)
    assert login.status == 200
    assert session_cookie_attributes(login).get("secure") is True


async def test_session_is_stored_by_hash_not_by_value(client, store):
    caller = await signup(client)
    sessions = await store.sessions.find({"userId": caller.id}).to_list(None)
    assert len(sessions) == 1
    assert sessions[0]["_id"] == hashlib.sha256(caller.session.encode()).hexdigest()
    assert caller.session not in str(sessions[0])
    assert sessions[0]["expiresAt"] - sessions[0]["createdAt"] == timedelta(days=30)


async def test_duplicate_email_is_409_case_insensitively(client, store):
    first = await post_signup(client, "Alice@Example.com")
    assert first.status == 201
    second = await post_signup(client, "alice@EXAMPLE.COM", password="another password")
    assert second.status == 409
    body = await second.json()
    assert set(body) == {"error"} and isinstance(body["error"], str) and body["error"]
    assert "svc_session" not in second.cookies
    assert await store.users.count_documents({}) == 1


async def test_email_is_stored_lowercased_and_login_ignores_case(client, store):
    response = await post_signup(client, "MiXeD.Case@Example.COM")
    assert response.status == 201
    assert (await response.json())["user"]["email"] == "mixed.case@example.com"
    stored = await store.users.find_one({})
    assert stored["email"] == "mixed.case@example.com"
    login = await post_login(client, "MIXED.case@example.com", PASSWORD)
    assert login.status == 200
    assert (await login.json())["user"]["id"] == stored["_id"]


async def test_login_returns_the_user_and_a_new_working_cookie(client, store):
    caller = await signup(client, name="Grace Hopper")
    response = await post_login(client, caller.email, caller.password)
    assert response.status == 200
    text = await response.text()
    body = json.loads(text)
    assert set(body) == {"user"}
    assert set(body["user"]) == USER_FIELDS
    assert body["user"]["id"] == caller.id
    assert body["user"]["name"] == "Grace Hopper"
    assert "password" not in text.lower()
    attributes = session_cookie_attributes(response)
    assert attributes.get("httponly") is True
    assert str(attributes.get("samesite")).lower() == "lax"
    assert attributes.get("path") == "/"
    token = str(attributes[""])
    assert token and token != caller.session
    assert await store.sessions.count_documents({"userId": caller.id}) == 2
    me = await client.get("/api/auth/me", headers=cookie(token))
    assert me.status == 200
    assert (await me.json())["id"] == caller.id


async def test_wrong_password_and_unknown_email_get_the_same_401(client, store):
    caller = await signup(client)
    wrong_password = await post_login(client, caller.email, "not the password")
    unknown_email = await post_login(client, "nobody@example.com", caller.password)
    for response in (wrong_password, unknown_email):
        assert response.status == 401
        assert await response.json() == {"error": "Invalid email or password"}
        assert "svc_session" not in response.cookies
    assert await store.sessions.count_documents({}) == 1


async def test_password_is_stored_as_an_scrypt_hash(client, store):
    caller = await signup(client, password="s3cret-pass-phrase")
    stored = await store.users.find_one({"_id": caller.id})
    assert stored["passwordHash"].startswith("scrypt$")
    assert "s3cret-pass-phrase" not in str(stored)
    assert not any(value == "s3cret-pass-phrase" for value in stored.values())


async def test_logout_deletes_the_session_server_side(client, store):
    caller = await signup(client)
    assert (await client.get("/api/auth/me", headers=caller.cookie)).status == 200
    assert await store.sessions.count_documents({"userId": caller.id}) == 1
    response = await client.post("/api/auth/logout", headers=caller.cookie)
    assert response.status == 204
    assert await response.read() == b""
    assert session_cookie_attributes(response).get("max-age") == "0"
    assert await store.sessions.count_documents({"userId": caller.id}) == 0
    after = await client.get("/api/auth/me", headers=caller.cookie)
    assert after.status == 401
    assert await after.json() == {"error": "Not authenticated"}


async def test_logout_leaves_other_sessions_alone(client, store):
    caller = await signup(client)
    login = await post_login(client, caller.email, caller.password)
    second = str(session_cookie_attributes(login)[""])
    assert (await client.post("/api/auth/logout", headers=caller.cookie)).status == 204
    assert (await client.get("/api/auth/me", headers=cookie(second))).status == 200
    assert await store.sessions.count_documents({"userId": caller.id}) == 1


async def test_logout_is_immediate_even_with_requests_in_flight(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    caller = await signup(client)
    statuses = []
    for _ in range(5):
        login = await post_login(client, caller.email, caller.password)
        headers = cookie(str(session_cookie_attributes(login)[""]))
        in_flight = [client.get("/api/auth/me", headers=headers) for _ in range(5)]
        *_, logout = await asyncio.gather(*in_flight, client.post("/api/auth/logout", headers=headers))
        client.session.cookie_jar.clear()
        assert logout.status == 204
        statuses.append((await client.get("/api/auth/me", headers=headers)).status)
    assert await store.sessions.count_documents({"userId": caller.id}) == 1
    assert statuses == [401] * 5


async def test_logout_without_a_session_is_still_204(client):
    response = await client.post("/api/auth/logout")
    assert response.status == 204
    response = await client.post("/api/auth/logout", headers=cookie("not-a-real-session"))
    assert response.status == 204


async def test_expired_session_gets_session_expired(client, store):
    # The app keeps resolved sessions in memory for 2 s (svc/cache.py), so the session is
    # seeded as expired before the app has ever looked it up; a second, live session is the control.
    caller = await signup(client)
    login = await post_login(client, caller.email, caller.password)
    live = str(session_cookie_attributes(login)[""])
    past = datetime.now(UTC) - timedelta(days=1)
    session_id = hashlib.sha256(caller.session.encode()).hexdigest()
    result = await store.sessions.update_one({"_id": session_id}, {"$set": {"expiresAt": past}})
    assert result.modified_count == 1
    response = await client.get("/api/auth/me", headers=caller.cookie)
    assert response.status == 401
    assert await response.json() == {"error": "Session expired"}
    assert (await client.get("/api/auth/me", headers=cookie(live))).status == 200
    again = await client.get("/api/auth/me", headers=caller.cookie)
    assert await again.json() == {"error": "Session expired"}


async def test_garbage_or_missing_cookie_is_not_authenticated(client):
    await signup(client)
    for headers in (cookie("garbage"), cookie("x" * 43), {}):
        response = await client.get("/api/auth/me", headers=headers)
        assert response.status == 401
        assert await response.json() == {"error": "Not authenticated"}


async def test_session_route_refuses_an_api_key(client):
    caller = await signup(client)
    key = await create_key(client, caller)
    identity = await client.get("/api/auth/key-identity", headers=bearer(key))
    assert identity.status == 200
    response = await client.get("/api/auth/me", headers=bearer(key))
    assert response.status == 401
    assert await response.json() == {"error": "Not authenticated"}


async def run_cli(
    db_uri, secret_key, data_dir: Path, *args: str, stdin: bytes | None = None
) -> tuple[int, str, str]:
    """`svc ARGS...` in a subprocess pointed at the test's database."""
    env = dict(os.environ)
    env.update({"SVC_MONGODB_URI": db_uri, "SVC_SECRET_KEYS": secret_key, "SVC_DATA_DIR": str(data_dir)})
    executable = Path(sys.executable).parent / "svc"
    process = await asyncio.create_subprocess_exec(
        str(executable),
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(stdin), CLI_TIMEOUT_S)
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


async def test_cli_users_create_makes_an_account_that_can_log_in(client, store, db_uri, secret_key, tmp_path):
    code, stdout, stderr = await run_cli(
        db_uri,
        secret_key,
        tmp_path / "cli",
        "users",
        "create",
        "--email",
        "Cli.User@Example.com",
        "--password",
        "cli password 123",
        "--name",
        "Cli User",
    )
    assert code == 0, stderr
    user = json.loads(stdout)
    assert set(user) == USER_FIELDS
    assert user["email"] == "cli.user@example.com"
    assert user["name"] == "Cli User"
    assert user["handle"] is None and user["handleLocked"] is False
    assert "password" not in stdout.lower()
    stored = await store.users.find_one({"_id": user["id"]})
    assert stored["passwordHash"].startswith("scrypt$")
    login = await post_login(client, "cli.user@example.com", "cli password 123")
    assert login.status == 200
    assert (await login.json())["user"]["id"] == user["id"]


async def test_cli_users_create_with_a_taken_email_exits_1(client, store, db_uri, secret_key, tmp_path):
    caller = await signup(client, email="taken@example.com")
    code, stdout, stderr = await run_cli(
        db_uri,
        secret_key,
        tmp_path / "cli",
        "users",
        "create",
        "--email",
        "TAKEN@example.com",
        "--password",
        "another password",
    )
    assert code == 1
    assert "error:" in stderr
    assert stdout.strip() == ""
    assert await store.users.count_documents({}) == 1
    login = await post_login(client, caller.email, caller.password)
    assert login.status == 200


async def test_cli_users_create_reads_the_password_from_stdin(client, db_uri, secret_key, tmp_path):
    code, stdout, stderr = await run_cli(
        db_uri,
        secret_key,
        tmp_path / "cli",
        "users",
        "create",
        "--email",
        "stdin@example.com",
        "--password",
        "-",
        stdin=b"piped password 42\n",
    )
    assert code == 0, stderr
    user = json.loads(stdout)
    assert user["email"] == "stdin@example.com"
    assert user["name"] == "stdin"
    login = await post_login(client, "stdin@example.com", "piped password 42")
    assert login.status == 200
    assert (await login.json())["user"]["id"] == user["id"]


async def test_cli_users_create_refuses_a_short_password(client, store, db_uri, secret_key, tmp_path):
    code, stdout, stderr = await run_cli(
        db_uri,
        secret_key,
        tmp_path / "cli",
        "users",
        "create",
        "--email",
        "short@example.com",
        "--password",
        "short",
    )
    assert code == 1
    assert "error:" in stderr and "password" in stderr
    assert stdout.strip() == ""
    assert await store.users.count_documents({}) == 0
