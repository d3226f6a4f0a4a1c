"""Personal API keys: create (the value is shown once, on the answer to the form), list, revoke;
keys scoped to one install, which is what a pipeline should carry.

The list never shows a key's value (only its last four characters), although the
JSON API returns them: a page is easier to shoulder-surf, screenshot or leave open
than an API response, so the dashboard keeps to "shown once".
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from api.context import services
from api.pages.base import PageTable, Viewer, form, parse, render
from svc.identity import CreateKeyBody

routes = PageTable()


def masked(key: dict[str, Any]) -> dict[str, Any]:
    """A key as the list shows it: everything but its value, which is cut to the last four."""
    value = str(key.get("key") or "")
    return {**{k: v for k, v in key.items() if k != "key"}, "hint": f"…{value[-4:]}" if value else ""}


async def keys_context(request: web.Request, viewer: Viewer) -> dict[str, Any]:
    """The viewer's keys (masked, each with the install it is scoped to) and the installs a new
    key may be scoped to: the keys of GET /api/auth/keys, from the same `ApiKeys.list_for_user`."""
    svc = services(request)
    keys = [masked(k) for k in await svc.keys.list_for_user(viewer.user_id)]
    installs = await svc.installs.list(viewer.principal)
    return {"keys": keys, "installs": installs}


@routes.get("/keys")
async def keys_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """My keys and the form to create one."""
    return render(request, "keys.html", viewer, created=None, **await keys_context(request, viewer))


@routes.post("/keys")
async def create_key(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Create a key and show its value this once (the answer is not cached, not redirected to)."""
    data = await form(request)
    body = parse(
        CreateKeyBody, {"label": data.get("label") or None, "installId": data.get("installId") or None}
    )
    created = await services(request).keys.create_for_user(viewer.user_id, body)
    response = render(request, "keys.html", viewer, created=created, **await keys_context(request, viewer))
    response.headers["Cache-Control"] = "no-store"
    return response


@routes.post("/keys/{id}/revoke")
async def revoke_key(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Revoke a key at once."""
    await services(request).keys.delete_for_user(viewer.user_id, request.match_info["id"])
    raise web.HTTPSeeOther("/keys")
