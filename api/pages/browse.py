"""The template browser: published templates a deployer can install, newest first, searchable.

The same `Templates.list_published` as GET /api/templates (public templates, and the viewer's
own published team ones), with its search (`q`) and its cursor for the next page. Each entry
leads to the template's page, which has the install button.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from api.context import services
from api.pages.base import PageTable, Viewer, render
from svc.templates import LIST_DEFAULT

routes = PageTable()
MAX_SEARCH = 200
TOO_LONG = f"Search for at most {MAX_SEARCH} characters"


@routes.get("/browse")
async def browse(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Published templates, optionally those matching `q`, a page at a time (`cursor`)."""
    search = request.query.get("q", "").strip()
    cursor = request.query.get("cursor") or None
    context: dict[str, Any] = {
        "search": search, "paged": bool(cursor), "templates": [], "next_cursor": None, "error": None
    }
    if len(search) > MAX_SEARCH:  # the search box stops at this length; a hand-made URL may not
        return render(request, "browse.html", viewer, status=400, **{**context, "error": TOO_LONG})
    templates, next_cursor = await services(request).templates.list_published(
        viewer.principal, LIST_DEFAULT, cursor, search or None
    )
    return render(
        request, "browse.html", viewer, **{**context, "templates": templates, "next_cursor": next_cursor}
    )
