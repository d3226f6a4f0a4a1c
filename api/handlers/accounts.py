"""Sessions, the profile and personal keys (spec "Accounts and keys", design "Sessions")."""

from __future__ import annotations

from aiohttp import web

from api.auth import SESSION_COOKIE, clear_session_cookie, set_session_cookie
from api.context import principal, services, user_id
from api.routing import RouteTable
from api.schemas import CreatedPersonalKey, HandleReply, KeyIdentity, PersonalKeyList, User, UserReply
from svc.identity import SESSION_LIFETIME, CreateKeyBody, HandleBody, LoginBody, SignupBody, public_user

routes = RouteTable()
SESSION_MAX_AGE = int(SESSION_LIFETIME.total_seconds())


@routes.post("/api/auth/signup", auth="P", body=SignupBody, status=201, response=UserReply)
async def signup(request: web.Request, body: SignupBody) -> web.Response:
    """Create an account and log it in: 201 {user} and the session cookie."""
    user, token = await services(request).accounts.signup(body)
    response = web.json_response({"user": public_user(user)}, status=201)
    set_session_cookie(response, request, token, SESSION_MAX_AGE)
    return response


@routes.post("/api/auth/login", auth="P", body=LoginBody, response=UserReply)
async def login(request: web.Request, body: LoginBody) -> web.Response:
    """Check email and password: 200 {user} and the session cookie."""
    user, token = await services(request).accounts.login(body)
    response = web.json_response({"user": public_user(user)})
    set_session_cookie(response, request, token, SESSION_MAX_AGE)
    return response


@routes.post("/api/auth/logout", auth="P", status=204)
async def logout(request: web.Request) -> web.Response:
    """Delete the session server-side (if there is one) and clear the cookie: 204."""
    token = request.cookies.get(SESSION_COOKIE)
    if token:
        await services(request).accounts.end_session(token)
    response = web.Response(status=204)
    clear_session_cookie(response)
    return response


@routes.get("/api/auth/me", auth="S", response=User)
async def me(request: web.Request) -> web.Response:
    """The logged-in user."""
    return web.json_response(public_user(await services(request).accounts.get_user(user_id(request))))


@routes.patch("/api/auth/me", auth="S", body=HandleBody, response=HandleReply)
async def set_handle(request: web.Request, body: HandleBody) -> web.Response:
    """Set the public handle (once)."""
    handle = await services(request).accounts.set_handle(user_id(request), body)
    return web.json_response({"ok": True, "handle": handle})


@routes.get("/api/auth/keys", auth="S", response=PersonalKeyList)
async def list_keys(request: web.Request) -> web.Response:
    """The user's personal keys, newest first, full values included."""
    return web.json_response({"keys": await services(request).keys.list_for_user(user_id(request))})


@routes.post("/api/auth/keys", auth="S", body=CreateKeyBody, status=201, response=CreatedPersonalKey)
async def create_key(request: web.Request, body: CreateKeyBody) -> web.Response:
    """A new personal key: 201."""
    return web.json_response(await services(request).keys.create_for_user(user_id(request), body), status=201)


@routes.delete("/api/auth/keys/{id}", auth="S", status=204)
async def delete_key(request: web.Request) -> web.Response:
    """Revoke a personal key: 204."""
    await services(request).keys.delete_for_user(user_id(request), request.match_info["id"])
    return web.Response(status=204)


@routes.get("/api/auth/key-identity", auth="K", response=KeyIdentity)
async def key_identity(request: web.Request) -> web.Response:
    """Whose key this is: {userName, orgName, orgSlug}."""
    return web.json_response(await services(request).credentials.key_identity(principal(request)))
