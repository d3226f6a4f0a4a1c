"""An install's versions: what is available, the plan, upgrade, roll back, automatic upgrades."""

from __future__ import annotations

from aiohttp import web

from api.context import principal, services
from api.routing import RouteTable
from api.schemas.upgrades import AutoUpgradeReply, InstallVersions, MoveReply
from svc.installs import AutoUpgradeBody, UpgradeBody

routes = RouteTable()


@routes.get("/api/installs/{installId}/versions", auth="K/S", response=InstallVersions)
async def install_versions(request: web.Request) -> web.Response:
    """The install's version, the newest it can move to (class, change logs), its history."""
    result = await services(request).upgrades.versions(principal(request), request.match_info["installId"])
    return web.json_response(result)


@routes.post("/api/installs/{installId}/upgrade", auth="K", body=UpgradeBody, response=MoveReply)
async def upgrade_install(request: web.Request, body: UpgradeBody) -> web.Response:
    """Move the install to a newer version (the newest by default); `dryRun` answers the plan only.
    Under org governance a MAJOR or widening move waits for approval (`status: pending_approval`)."""
    result = await services(request).upgrades.move(
        principal(request), request.match_info["installId"], body, "upgrade"
    )
    return web.json_response(result)


@routes.post("/api/installs/{installId}/rollback", auth="K", body=UpgradeBody, response=MoveReply)
async def rollback_install(request: web.Request, body: UpgradeBody) -> web.Response:
    """Move the install back to an older version (the one before its last move by default),
    under the same rules as an upgrade; `dryRun` answers the plan only."""
    result = await services(request).upgrades.move(
        principal(request), request.match_info["installId"], body, "rollback"
    )
    return web.json_response(result)


@routes.patch(
    "/api/installs/{installId}/auto-upgrade", auth="K", body=AutoUpgradeBody, response=AutoUpgradeReply
)
async def set_auto_upgrade(request: web.Request, body: AutoUpgradeBody) -> web.Response:
    """Opt the install into automatic PATCH (`patch`) or PATCH and MINOR (`minor`) upgrades, or out."""
    upgrades = services(request).upgrades
    result = await upgrades.set_auto(principal(request), request.match_info["installId"], body)
    return web.json_response(result)
