"""Spend limits of an install and redelivery of a run's callback (K/S; the reach rule of
svc/installs/reach.py: the caller's installs only, 404 otherwise)."""

from __future__ import annotations

from aiohttp import web

from api.context import principal, services
from api.routing import RouteTable
from api.schemas.caps import CallbackDeliveryReply, InstallLimits
from svc.installs import LimitsBody, set_limits

routes = RouteTable()


@routes.patch("/api/installs/{installId}/limits", auth="K/S", body=LimitsBody, response=InstallLimits)
async def set_install_limits(request: web.Request, body: LimitsBody) -> web.Response:
    """Set or clear the install's monthly spend cap (cents) and per-run token cap (null clears)."""
    svc = services(request)
    install = await svc.installs.owned(principal(request), request.match_info["installId"])
    install = {**install, "limits": await set_limits(svc.store, install, body)}
    return web.json_response(await svc.spend_caps.limits_view(install))


@routes.post(
    "/api/installs/{installId}/runs/{runId}/callback/redeliver", auth="K/S", response=CallbackDeliveryReply
)
async def redeliver_callback(request: web.Request) -> web.Response:
    """Send the run's callback again now (404 when the run has no callback); the delivery record."""
    svc = services(request)
    install = await svc.installs.owned(principal(request), request.match_info["installId"])
    record = await svc.callbacks.redeliver(install, request.match_info["runId"])
    return web.json_response(record)
