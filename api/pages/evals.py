"""Builder pages for eval suites: run a suite, a scorecard with each case, a case's run.

The suite itself is edited in the definition editor (`evals`, docs/evals.md); the actions call
the same `Evals` service as `/api/templates/:id/evals/*` with the viewer's session principal.
"""

from __future__ import annotations

from aiohttp import web

from api.context import services
from api.pages.base import PageTable, Viewer, done, render

routes = PageTable()


@routes.post("/templates/{id}/evals/run")
async def run_suite(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Run the template's eval suite now; then its scorecard."""
    template_id = request.match_info["id"]
    card = await services(request).evals.run(viewer.principal, template_id)
    return done(request, f"/templates/{template_id}/evals/{card['id']}", id=card["id"])


@routes.get("/templates/{id}/evals/{scorecardId}")
async def scorecard_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """One scorecard: the verdict, the totals, each case with its reason and its run."""
    match = request.match_info
    card = await services(request).evals.scorecard(viewer.principal, match["id"], match["scorecardId"])
    return render(request, "scorecard.html", viewer, card=card, template_id=match["id"])


@routes.get("/templates/{id}/evals/runs/{runId}")
async def eval_run_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """One case's run: its task, answer and events."""
    match = request.match_info
    run = await services(request).evals.eval_run(viewer.principal, match["id"], match["runId"])
    return render(request, "eval_run.html", viewer, run=run, template_id=match["id"])
