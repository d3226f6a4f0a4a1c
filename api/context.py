"""Typed application and request keys, and accessors handlers use."""

from __future__ import annotations

from aiohttp import web

from api.logs import PathRedactor
from config.settings import Settings
from svc.identity import Principal
from svc.wiring import Services

SETTINGS = web.AppKey("settings", Settings)
SERVICES = web.AppKey("services", Services)
ROUTE_TABLE = web.AppKey("routes", tuple)
PATH_REDACTOR = web.AppKey("path_redactor", PathRedactor)

PRINCIPAL: web.RequestKey[Principal | None] = web.RequestKey("principal", Principal)
REQUEST_ID = web.RequestKey("request_id", str)


def services(request: web.Request) -> Services:
    """The domain services of this app."""
    return request.app[SERVICES]


def principal(request: web.Request) -> Principal:
    """The authenticated caller (set by the route's auth guard)."""
    caller = request[PRINCIPAL]
    assert caller is not None, "principal() on a public route"
    return caller


def user_id(request: web.Request) -> str:
    """The calling user's id; for routes whose auth code guarantees a user."""
    caller = principal(request)
    assert caller.user_id is not None
    return caller.user_id
