"""The API reference: GET /api/openapi.json, and the page at /docs that renders it.

The page uses Swagger UI from npm (`swagger-ui-dist`, vendored unmodified under
api/reference/vendor with its version in the path) and is served by this app alone:
no CDN, so it works offline and behind a firewall. Its scripts are files, never
inline, so the Content-Security-Policy can forbid inline scripts and every origin
but our own. Assets are cache-busted by path (the vendored version, or a content
hash for our own two files) and so can be cached for a year; each is gzipped once,
in memory, on its first request.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from api import openapi
from api.context import ROUTE_TABLE
from api.routing import Route, RouteTable
from api.schemas import OpenAPIDocument

routes = RouteTable()

REFERENCE_DIR = Path(__file__).resolve().parent.parent / "reference"
SWAGGER_UI_VERSION = "5.35.0"
VENDOR = f"swagger-ui-dist/{SWAGGER_UI_VERSION}"
ASSET_PREFIX = "/docs/assets/"
# The page may load only what this app serves; Swagger UI draws some icons as data: URIs.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-cache",
}
IMMUTABLE = "public, max-age=31536000, immutable"


@dataclass(frozen=True)
class Asset:
    """A file of the page, read and gzipped once."""

    path: Path
    content_type: str

    @functools.cached_property
    def body(self) -> bytes:
        """The file as it is."""
        return self.path.read_bytes()

    @functools.cached_property
    def gzipped(self) -> bytes:
        """The file gzipped (mtime 0, so the bytes and the ETag never change between runs)."""
        return gzip.compress(self.body, compresslevel=9, mtime=0)

    @functools.cached_property
    def etag(self) -> str:
        """A strong ETag of the content."""
        return hashlib.sha256(self.body).hexdigest()[:32]


def _hashed(name: str) -> str:
    """`docs.js` as `docs.<content hash>.js`, so a changed file gets a new URL."""
    stem, _, suffix = name.rpartition(".")
    digest = hashlib.sha256((REFERENCE_DIR / name).read_bytes()).hexdigest()[:12]
    return f"{stem}.{digest}.{suffix}"


JS = "application/javascript"
CSS = "text/css"
ASSETS: dict[str, Asset] = {
    f"{VENDOR}/swagger-ui-bundle.js": Asset(REFERENCE_DIR / "vendor" / VENDOR / "swagger-ui-bundle.js", JS),
    f"{VENDOR}/swagger-ui.css": Asset(REFERENCE_DIR / "vendor" / VENDOR / "swagger-ui.css", CSS),
    _hashed("docs.js"): Asset(REFERENCE_DIR / "docs.js", JS),
    _hashed("docs.css"): Asset(REFERENCE_DIR / "docs.css", CSS),
}
PAGE = (
    (REFERENCE_DIR / "index.html")
    .read_text()
    .format(
        swagger_js=ASSET_PREFIX + f"{VENDOR}/swagger-ui-bundle.js",
        swagger_css=ASSET_PREFIX + f"{VENDOR}/swagger-ui.css",
        page_js=ASSET_PREFIX + _hashed("docs.js"),
        page_css=ASSET_PREFIX + _hashed("docs.css"),
    )
    .encode()
)


@functools.lru_cache(maxsize=8)
def document(route_table: tuple[Route, ...]) -> bytes:
    """The serialised document of a route table (built once per table)."""
    return json.dumps(openapi.build(route_table)).encode()


@functools.lru_cache(maxsize=8)
def document_gzipped(route_table: tuple[Route, ...]) -> bytes:
    """The document gzipped (about 200 KB becomes about 20 KB), once per table."""
    return gzip.compress(document(route_table), compresslevel=9, mtime=0)


@routes.get("/api/openapi.json", auth="P", response=OpenAPIDocument)
async def openapi_document(request: web.Request) -> web.Response:
    """The OpenAPI 3.1 document, generated from the route table and the models."""
    table = request.app[ROUTE_TABLE]
    headers = {"Vary": "Accept-Encoding"}
    body = document(table)
    if "gzip" in request.headers.get("Accept-Encoding", ""):
        headers["Content-Encoding"] = "gzip"
        body = document_gzipped(table)
    return web.Response(body=body, content_type="application/json", headers=headers)


async def docs_page(request: web.Request) -> web.Response:
    """The API reference page: Swagger UI over /api/openapi.json."""
    return web.Response(body=PAGE, content_type="text/html", charset="utf-8", headers=PAGE_HEADERS)


async def docs_asset(request: web.Request) -> web.Response:
    """A script or stylesheet of the page (only the listed files; 404 for anything else)."""
    asset = ASSETS.get(request.match_info["name"])
    if asset is None:
        raise web.HTTPNotFound(reason="Not found")
    headers = {
        "Cache-Control": IMMUTABLE,
        "ETag": f'"{asset.etag}"',
        "Vary": "Accept-Encoding",
        "X-Content-Type-Options": "nosniff",
    }
    if request.headers.get("If-None-Match") == headers["ETag"]:
        return web.Response(status=304, headers=headers)
    body = asset.body
    if "gzip" in request.headers.get("Accept-Encoding", ""):
        headers["Content-Encoding"] = "gzip"
        body = asset.gzipped
    return web.Response(body=body, content_type=asset.content_type, charset="utf-8", headers=headers)


# Pages are not API operations: they stay out of the route table (and so out of the document).
pages = [web.get("/docs", docs_page), web.get(ASSET_PREFIX + "{name:.+}", docs_asset)]
