"""Install endpoints that stand on credentials alone (the rest arrive with installs)."""

from __future__ import annotations

from aiohttp import web

from api.context import principal
from api.errors import error_response
from api.routing import RouteTable

routes = RouteTable()


@routes.get("/api/installs/whoami", auth="AK")
async def whoami(request: web.Request) -> web.Response:
    """The install an application key is scoped to; 400 with a hint for an unscoped key."""
    install_id = principal(request).install_id
    if install_id is None:
        return error_response(
            400,
            "key not linked to a pipeline install",
            hint="Scope the key as <installId>:<key> in APP_API_KEYS",
        )
    return web.json_response({"installId": install_id})
