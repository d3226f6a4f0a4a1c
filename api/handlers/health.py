"""GET /api/health: is the database reachable, is Ray reachable."""

from __future__ import annotations

from aiohttp import web

from api.context import services
from api.errors import error_response
from api.routing import RouteTable
from api.schemas import Health

routes = RouteTable()


@routes.get("/api/health", auth="P", response=Health)
async def health(request: web.Request) -> web.Response:
    """200 when every dependency answers, 503 naming the ones that do not."""
    checks = {name: "ok" if ok else "unreachable" for name, ok in (await services(request).health()).items()}
    if all(value == "ok" for value in checks.values()):
        return web.json_response({"status": "ok", "checks": checks})
    return error_response(503, "Service degraded", status="degraded", checks=checks)
