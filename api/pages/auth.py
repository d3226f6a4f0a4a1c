"""Sign up, sign in, sign out: the same accounts and sessions as `/api/auth/*`."""

from __future__ import annotations

from aiohttp import web

from api.auth import SESSION_COOKIE, clear_session_cookie, set_session_cookie
from api.clientip import client_ip
from api.context import services
from api.errors import status_of
from api.handlers.accounts import SESSION_MAX_AGE
from api.pages.base import PageTable, Viewer, back, form, parse, render
from svc.core import ServiceError
from svc.identity import LoginBody, SignupBody

routes = PageTable()


async def count_as(request: web.Request, api_path: str) -> None:
    """Count this form post against the API route it stands for, so the same limits apply
    (the auth rule's 20 per 15 minutes per address covers the sign-in page too)."""
    svc = services(request)
    if svc.rate_limiter is not None:
        await svc.rate_limiter.hit(client_ip(request, svc.settings.trusted_proxies), "POST", api_path)


def next_path(request: web.Request) -> str:
    """Where to go after signing in: a local path only (no open redirect)."""
    target = request.query.get("next", "/")
    return target if target.startswith("/") and not target.startswith("//") else "/"


@routes.get("/signin", signed_in=False)
async def signin_page(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    """The sign-in form (a signed-in visitor goes straight on)."""
    if viewer is not None:
        raise web.HTTPSeeOther(next_path(request))
    return render(request, "signin.html", None, next=next_path(request), error=None, email="")


@routes.post("/signin", signed_in=False)
async def signin(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    """Check the password, start a session, go on to the page that asked for it."""
    await count_as(request, "/api/auth/login")
    data = await form(request)
    try:
        _, token = await services(request).accounts.login(parse(LoginBody, data))
    except ServiceError as exc:
        return render(
            request,
            "signin.html",
            None,
            status=status_of(exc),
            next=next_path(request),
            error=exc.message,
            email=data.get("email", ""),
        )
    response = web.HTTPSeeOther(next_path(request))
    set_session_cookie(response, request, token, SESSION_MAX_AGE)
    raise response


@routes.get("/signup", signed_in=False)
async def signup_page(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    """The sign-up form."""
    if viewer is not None:
        raise web.HTTPSeeOther("/")
    return render(request, "signup.html", None, next=next_path(request), error=None, email="", name="")


@routes.post("/signup", signed_in=False)
async def signup(request: web.Request, viewer: Viewer | None) -> web.StreamResponse:
    """Create the account and sign it in."""
    await count_as(request, "/api/auth/signup")
    data = await form(request)
    try:
        _, token = await services(request).accounts.signup(parse(SignupBody, data))
    except ServiceError as exc:
        return render(
            request,
            "signup.html",
            None,
            status=status_of(exc),
            next=next_path(request),
            error=exc.message,
            email=data.get("email", ""),
            name=data.get("name", ""),
        )
    response = web.HTTPSeeOther(next_path(request))
    set_session_cookie(response, request, token, SESSION_MAX_AGE)
    raise response


@routes.post("/signout")
async def signout(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """End the session server-side and drop the cookie."""
    token = request.cookies.get(SESSION_COOKIE)
    if token:
        await services(request).accounts.end_session(token)
    response = web.HTTPSeeOther(back(request, "/signin"))
    clear_session_cookie(response)
    raise response
