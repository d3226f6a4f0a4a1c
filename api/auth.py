"""Resolve the credential a route's auth code asks for, and nothing else.

A route accepts exactly the credentials of its code: an S route ignores a
bearer key, a K route ignores a session cookie, and so on.
"""

from __future__ import annotations

from aiohttp import web

from api.context import services
from api.origins import cookie_secure, refusal, same_origin
from api.routing import AuthCode
from svc.core import Forbidden, Unauthorized
from svc.identity import Principal

SESSION_COOKIE = "svc_session"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def bearer_token(request: web.Request) -> str | None:
    """The token of an `Authorization: Bearer …` header, if any."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


async def authenticate(request: web.Request, code: AuthCode) -> Principal | None:
    """The caller for a route with this auth code (None for public routes)."""
    credentials = services(request).credentials
    if code == "P":
        return None
    if code == "T":
        return await credentials.from_webhook_token(request.match_info.get("token", ""))
    bearer = bearer_token(request)
    if code == "K" or (code == "K/S" and bearer is not None):
        if bearer is None:
            raise Unauthorized("Missing API key")
        return await credentials.from_api_key(bearer)
    if code in ("S", "K/S"):
        return await _session(request)
    if code == "AK":
        if bearer is None:
            raise Unauthorized("Missing API key")
        return credentials.from_app_key(bearer)
    if code == "I":
        if bearer is None:
            raise Unauthorized("Missing install token")
        return await credentials.from_install_token(bearer)
    raise AssertionError(f"unknown auth code {code}")


async def optional_key(request: web.Request) -> Principal | None:
    """For public routes that show more to a key holder: the key's caller, if a bearer is sent."""
    bearer = bearer_token(request)
    if bearer is None:
        return None
    return await services(request).credentials.from_api_key(bearer)


async def _session(request: web.Request) -> Principal:
    token = request.cookies.get(SESSION_COOKIE)
    if not token:
        raise Unauthorized("Not authenticated")
    caller = await services(request).credentials.from_session(token)
    # SameSite=Lax already stops cross-site form posts; refusing a foreign Origin on
    # unsafe methods also covers same-site subdomains and older browsers.
    # A client without Origin (curl with a cookie jar) is not a browser page of another site.
    origin = request.headers.get("Origin")
    if request.method in UNSAFE_METHODS and origin and not same_origin(request, origin):
        raise Forbidden(refusal(request, origin))
    return caller


def set_session_cookie(response: web.StreamResponse, request: web.Request, token: str, max_age: int) -> None:
    """Attach the session cookie (HttpOnly, SameSite=Lax, Secure on https)."""
    response.set_cookie(
        SESSION_COOKIE,
        token,
        max_age=max_age,
        path="/",
        httponly=True,
        samesite="Lax",
        secure=cookie_secure(request),
    )


def clear_session_cookie(response: web.StreamResponse) -> None:
    """Tell the browser to drop the session cookie."""
    response.del_cookie(SESSION_COOKIE, path="/")
