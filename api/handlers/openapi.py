"""GET /api/openapi.json: the OpenAPI document of every route of this app."""

from __future__ import annotations

from aiohttp import web

from api import openapi
from api.context import ROUTE_TABLE
from api.routing import RouteTable

routes = RouteTable()


@routes.get("/api/openapi.json", auth="P")
async def openapi_document(request: web.Request) -> web.Response:
    """The OpenAPI 3.1 document, generated from the route table and the models."""
    return web.json_response(openapi.build(request.app[ROUTE_TABLE]))
