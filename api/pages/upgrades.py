"""The install's Versions tab: the version it runs, the newest available with its plan (what
changes, the values it needs, the permission changes to accept, what happens on the platform),
apply and roll-back buttons, automatic upgrades, and the install's version history.

The page and the JSON routes (api/handlers/upgrades.py) call the same service
(`svc.installs.Upgrades`) with the viewer's session principal, so they answer alike.
"""

from __future__ import annotations

from typing import Any, Literal

from aiohttp import web

from api.context import services
from api.pages.base import PageTable, Viewer, done, form, parse, render
from api.pages.install_view import heading
from svc.core import ServiceError
from svc.installs import AutoUpgradeBody, UpgradeBody

routes = PageTable()


def move_body(data: dict[str, str]) -> dict[str, Any]:
    """The form's fields as the JSON body of a move: version, acceptance, values by name."""
    body: dict[str, Any] = {}
    if data.get("version", "").isdigit():
        body["version"] = int(data["version"])
    if data.get("acceptPermissions"):
        body["acceptPermissions"] = data["acceptPermissions"]
    variables = {k[4:]: v for k, v in data.items() if k.startswith("var.") and v}
    secrets = {k[7:]: v for k, v in data.items() if k.startswith("secret.") and v}
    if variables:
        body["variables"] = variables
    if secrets:
        body["secrets"] = secrets
    return body


@routes.get("/installs/{id}/versions")
async def versions_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Versions: the available version and its plan, the rollback's plan, history, auto-upgrades."""
    svc = services(request)
    install = await svc.installs.owned(viewer.principal, request.match_info["id"])
    state = await svc.upgrades.versions(viewer.principal, install["_id"])
    plans: dict[str, Any] = {}
    problems: dict[str, str] = {}
    wanted = request.query.get("version", "")
    moves: tuple[tuple[Literal["upgrade", "rollback"], Any], ...] = (
        ("upgrade", state["updateAvailable"]),
        ("rollback", state["previousVersion"]),
    )
    for direction, asked in moves:
        if not asked:
            continue
        body = {
            "dryRun": True,
            **({"version": int(wanted)} if wanted.isdigit() and direction == "upgrade" else {}),
        }
        try:
            plans[direction] = (
                await svc.upgrades.move(viewer.principal, install["_id"], parse(UpgradeBody, body), direction)
            )["plan"]
        except ServiceError as exc:  # a target that cannot be planned still shows the page
            problems[direction] = exc.message
    return render(
        request,
        "install_versions.html",
        viewer,
        install=install,
        heading=await heading(request, install),  # main's install header: version and badge
        state=state,
        plans=plans,
        problems=problems,
        tab="versions",
    )


@routes.post("/installs/{id}/upgrade")
async def upgrade(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Apply the plan shown (with the values and the acceptance the form carries)."""
    return await _move(request, viewer, "upgrade")


@routes.post("/installs/{id}/rollback")
async def rollback(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Roll back to the version shown."""
    return await _move(request, viewer, "rollback")


async def _move(
    request: web.Request, viewer: Viewer, direction: Literal["upgrade", "rollback"]
) -> web.StreamResponse:
    install_id = request.match_info["id"]
    body = parse(UpgradeBody, move_body(await form(request)))
    answer = await services(request).upgrades.move(viewer.principal, install_id, body, direction)
    return done(request, f"/installs/{install_id}/versions", status=answer.get("status"))


@routes.post("/installs/{id}/auto-upgrade")
async def auto_upgrade(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Opt into automatic PATCH (or PATCH and MINOR) upgrades, or out."""
    install_id = request.match_info["id"]
    body = parse(AutoUpgradeBody, {"mode": (await form(request)).get("mode", "")})
    await services(request).upgrades.set_auto(viewer.principal, install_id, body)
    return done(request, f"/installs/{install_id}/versions")
