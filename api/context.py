"""Typed application and request keys, and accessors handlers use."""

from __future__ import annotations

from aiohttp import web

from config.settings import Settings
from svc.credentials import Principal
from svc.services import Services

SETTINGS = web.AppKey("settings", Settings)
SERVICES = web.AppKey("services", Services)

PRINCIPAL = "principal"
REQUEST_ID = "request_id"


def services(request: web.Request) -> Services:
    """The domain services of this app."""
    return request.app[SERVICES]


def principal(request: web.Request) -> Principal:
    """The authenticated caller (set by the route's auth guard)."""
    return request[PRINCIPAL]


def user_id(request: web.Request) -> str:
    """The calling user's id; for routes whose auth code guarantees a user."""
    caller = principal(request)
    assert caller.user_id is not None
    return caller.user_id
