"""What every dashboard page shares: the page route table, the signed-in person, CSRF, rendering.

Pages use the same `svc_session` cookie and the same domain services as the JSON
API, so a page shows exactly what the person reaches through the API. The
difference is the failure shape: pages answer HTML (and redirect a signed-out
visitor to the sign-in page), while requests made by the page's own script
(`Accept: application/json`) get the API's `{"error": ...}` bodies.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import aiohttp_jinja2
from aiohttp import web
from pydantic import BaseModel, ValidationError

from api.auth import SESSION_COOKIE
from api.context import PRINCIPAL, services
from api.origins import refusal, same_origin
from svc.core import BadRequest, Forbidden, ServiceError, Unauthorized
from svc.identity import Principal

CSRF_FIELD = "_csrf"
CSRF_HEADER = "X-CSRF-Token"
UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass
class Viewer:
    """The signed-in person looking at a page, with the CSRF token of their session."""

    principal: Principal
    user: dict[str, Any]
    csrf: str

    @property
    def user_id(self) -> str:
        """The viewer's user id (sessions always carry one)."""
        assert self.principal.user_id is not None
        return self.principal.user_id


PageHandler = Callable[..., Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Page:
    """One dashboard route: method, path, handler, and whether it needs a signed-in viewer."""

    method: str
    path: str
    handler: PageHandler
    signed_in: bool = True


@dataclass
class PageTable:
    """Collects a module's page routes through decorators."""

    pages: list[Page] = field(default_factory=list)

    def get(self, path: str, *, signed_in: bool = True) -> Callable[[PageHandler], PageHandler]:
        """A page (or a fragment the page's script fetches)."""
        return self._add("GET", path, signed_in)

    def post(self, path: str, *, signed_in: bool = True) -> Callable[[PageHandler], PageHandler]:
        """A form submission or script request that changes state (CSRF-checked)."""
        return self._add("POST", path, signed_in)

    def _add(self, method: str, path: str, signed_in: bool) -> Callable[[PageHandler], PageHandler]:
        def decorate(handler: PageHandler) -> PageHandler:
            self.pages.append(Page(method, path, handler, signed_in))
            return handler

        return decorate


def csrf_token(session_token: str) -> str:
    """The session's CSRF token: derived from the session secret, so it needs no storage and
    dies with the session; a page on another origin cannot read the HttpOnly cookie to make it."""
    return hmac.new(session_token.encode(), b"svc-dashboard-csrf", hashlib.sha256).hexdigest()


async def viewer_of(request: web.Request) -> Viewer | None:
    """The signed-in viewer, or None for a visitor without a valid session."""
    token = request.cookies.get(SESSION_COOKIE)
    if not token:
        return None
    svc = services(request)
    try:
        principal = await svc.credentials.from_session(token)
    except Unauthorized:
        return None
    assert principal.user_id is not None
    user = await svc.accounts.get_user(principal.user_id)
    return Viewer(principal, user, csrf_token(token))


async def check_csrf(request: web.Request, viewer: Viewer | None) -> None:
    """Refuse a state-changing request from another origin or without the session's token."""
    # Browsers send Origin with every POST; a form without one did not come from our pages.
    origin = request.headers.get("Origin")
    if not same_origin(request, origin):
        raise Forbidden(refusal(request, origin))
    if viewer is None:
        return  # sign-in and sign-up forms: no session to ride on, the Origin check is what applies
    offered = request.headers.get(CSRF_HEADER)
    if offered is None and request.content_type in (
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    ):
        offered = str((await request.post()).get(CSRF_FIELD, ""))
    if not offered or not hmac.compare_digest(offered, viewer.csrf):
        raise Forbidden("Missing or invalid CSRF token; reload the page and try again")


def wants_json(request: web.Request) -> bool:
    """Whether the page's script made this request (it asks for JSON)."""
    return "application/json" in request.headers.get("Accept", "")


def guard(page: Page) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """Resolve the viewer, send a signed-out visitor to sign in, check CSRF, run the page."""

    async def handler(request: web.Request) -> web.StreamResponse:
        viewer = await viewer_of(request)
        request[PRINCIPAL] = viewer.principal if viewer else None
        if page.signed_in and viewer is None:
            if request.method == "GET" and not wants_json(request):
                raise web.HTTPSeeOther(f"/signin?next={quote(request.path_qs, safe='')}")
            raise Unauthorized("Not authenticated")
        if request.method in UNSAFE:
            # Sign-in and sign-up forms are posted without a session to ride on: Origin only.
            await check_csrf(request, viewer if page.signed_in else None)
        return await page.handler(request, viewer)

    handler.__name__ = page.handler.__name__
    handler.__doc__ = page.handler.__doc__
    return handler


def render(
    request: web.Request, name: str, viewer: Viewer | None, /, status: int = 200, **context: Any
) -> web.Response:
    """Render a template with the viewer and the page's context (autoescaped)."""
    return aiohttp_jinja2.render_template(
        name, request, {"viewer": viewer, "request": request, **context}, status=status
    )


async def form(request: web.Request) -> dict[str, str]:
    """The submitted form's fields (without the CSRF token), as strings."""
    data = await request.post()
    return {k: str(v) for k, v in data.items() if k != CSRF_FIELD and isinstance(v, str)}


def parse(model: type[BaseModel], data: dict[str, Any]) -> Any:
    """Validate form data with the API's own body model; 400 naming the field otherwise."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise BadRequest(f"{where}: {first['msg']}") from None


def done(request: web.Request, location: str, **payload: Any) -> web.Response:
    """After an action: JSON for the page's script, a 303 back to a page for a plain form."""
    if wants_json(request):
        return web.json_response({"ok": True, **payload})
    raise web.HTTPSeeOther(location)


def back(request: web.Request, fallback: str) -> str:
    """Where a form should return to: its own page (same origin only), else the fallback."""
    target = request.query.get("back", "")
    return target if target.startswith("/") and not target.startswith("//") else fallback


__all__ = [
    "CSRF_FIELD",
    "Page",
    "PageTable",
    "ServiceError",
    "Viewer",
    "back",
    "csrf_token",
    "done",
    "form",
    "guard",
    "parse",
    "render",
    "viewer_of",
    "wants_json",
]
