"""The operator dashboard: server-rendered pages on the same app, sessions and services as the API.

`setup(app)` is the one hook `api/app.py` calls. It adds the Jinja2 environment
(autoescaping on), the vendored static files under a content-hashed path (so a
changed file gets a new URL and old ones can be cached for a year), every page
route, and a middleware that gives pages their security headers and HTML error
pages while leaving `/api` exactly as it was.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path

import aiohttp_jinja2
import jinja2
from aiohttp import web
from aiohttp.typedefs import Handler

from api.context import REQUEST_ID
from api.errors import from_service_error
from api.pages import (
    auth,
    browse,
    builder,
    evals,
    install_live,
    install_settings,
    installs,
    keys,
    orgs,
    schedule,
    upgrades,
)
from api.pages.base import guard, viewer_of, wants_json
from api.pages.filters import FILTERS
from svc.core import ServiceError

log = logging.getLogger("svc.errors")
ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "templates"
STATIC = ROOT / "static"
# The JSON API, and the API reference (its own headers and JSON errors for its assets).
NOT_PAGES = ("/api/", "/docs/")
MODULES = (
    auth,
    installs,
    install_live,
    schedule,
    install_settings,
    browse,
    builder,
    evals,
    orgs,
    keys,
    upgrades,
)

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
STATUS_TEXT = {
    400: "Bad request",
    401: "Not signed in",
    403: "Forbidden",
    404: "Not found",
    405: "Not allowed",
}


def static_version() -> str:
    """A hash of every static file: part of each asset URL, so a deploy busts caches."""
    digest = hashlib.sha256()
    for path in sorted(STATIC.rglob("*")):
        if path.is_file():
            digest.update(path.relative_to(STATIC).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


class CompiledTemplates(jinja2.BytecodeCache):
    """Templates compiled once per process, kept in memory: every app built in it (the test suite
    builds one per test) renders from the same compiled code instead of compiling each template
    again (about 10 ms each). Jinja checks each entry against the template's source."""

    def __init__(self) -> None:
        self._code: dict[str, bytes] = {}

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        code = self._code.get(bucket.key)
        if code is not None:
            bucket.bytecode_from_string(code)

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        self._code[bucket.key] = bucket.bytecode_to_string()


COMPILED = CompiledTemplates()


def setup(app: web.Application) -> None:
    """Register the dashboard on the app (templates, static files, pages, middleware)."""
    version = static_version()
    env = aiohttp_jinja2.setup(
        app,
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
        bytecode_cache=COMPILED,
    )
    env.filters.update(FILTERS)
    env.globals["static"] = lambda name: f"/static/{version}/{name}"
    app[install_live.LIVE_SNAPSHOTS] = install_live.LiveSnapshots()
    app.middlewares.append(pages_middleware)
    app.router.add_get("/static/{version}/{name:[A-Za-z0-9._/-]+}", static_file)
    for module in MODULES:
        for page in module.routes.pages:
            app.router.add_route(page.method, page.path, guard(page))


async def static_file(request: web.Request) -> web.StreamResponse:
    """A vendored asset; cached for a year, since its URL changes whenever its content does."""
    name = request.match_info["name"]
    path = (STATIC / name).resolve()
    if STATIC not in path.parents or not path.is_file():
        raise web.HTTPNotFound()
    response = web.FileResponse(path)
    response.headers["Cache-Control"] = "public, max-age=31536000, immutable"
    return response


@web.middleware
async def pages_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Outside /api: security headers and Server-Timing on every answer, failures as HTML pages."""
    if request.path.startswith(NOT_PAGES) or request.path in ("/api", "/docs"):
        return await handler(request)
    started = time.perf_counter()
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            exc.headers.update(PAGE_HEADERS)
            raise
        response = await error_page(request, exc.status, STATUS_TEXT.get(exc.status, exc.reason))
    except ServiceError as exc:
        as_json = from_service_error(exc)
        if wants_json(request):
            response = as_json
        else:
            response = await error_page(request, as_json.status, exc.message)
            if "Retry-After" in as_json.headers:
                response.headers["Retry-After"] = as_json.headers["Retry-After"]
    except Exception:
        request_id = request.get(REQUEST_ID, "")
        log.exception("unhandled error on %s %s", request.method, request.path)
        response = await error_page(request, 500, f"Internal server error (request {request_id})")
    if not response.prepared:
        for name, value in PAGE_HEADERS.items():
            response.headers.setdefault(name, value)
        # Pages carry one person's data: no shared cache keeps them, and the back button after
        # signing out does not show them again (the static files set their own, long, policy).
        response.headers.setdefault("Cache-Control", "no-store")
        # The server's own time (browser dev tools and bench/pages.py read it).
        response.headers["Server-Timing"] = f"app;dur={(time.perf_counter() - started) * 1000:.1f}"
    return response


async def error_page(request: web.Request, status: int, message: str) -> web.Response:
    """The HTML error page (JSON for the page's own script)."""
    if wants_json(request):
        return web.json_response({"error": message}, status=status)
    try:
        viewer = await viewer_of(request)
    except ServiceError:
        viewer = None
    return aiohttp_jinja2.render_template(
        "error.html",
        request,
        {"viewer": viewer, "request": request, "status": status, "message": message},
        status=status,
    )


__all__ = ["setup"]
