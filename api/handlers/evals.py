"""Eval suites of templates: run one, read the scorecards and each case's run (docs/evals.md)."""

from __future__ import annotations

from aiohttp import web

from api.context import principal, services
from api.routing import RouteTable
from api.schemas.evals import EvalRun, Scorecard, ScorecardList
from svc.evals import HistoryQuery

routes = RouteTable()


@routes.post("/api/templates/{id}/evals/run", auth="K", status=201, response=Scorecard)
async def run_suite(request: web.Request) -> web.Response:
    """Run the eval suite of the caller's template or version draft as it is now; its scorecard."""
    card = await services(request).evals.run(principal(request), request.match_info["id"])
    return web.json_response(card, status=201)


@routes.get("/api/templates/{id}/evals/scorecards", auth="K", query=HistoryQuery, response=ScorecardList)
async def scorecards(request: web.Request, query: HistoryQuery) -> web.Response:
    """The template's scorecards, newest first (one version's with `?version=`)."""
    found = await services(request).evals.history(principal(request), request.match_info["id"], query.version)
    return web.json_response(found)


@routes.get("/api/templates/{id}/evals/scorecards/{scorecardId}", auth="K", response=Scorecard)
async def scorecard(request: web.Request) -> web.Response:
    """One scorecard with every case."""
    match = request.match_info
    return web.json_response(
        await services(request).evals.scorecard(principal(request), match["id"], match["scorecardId"])
    )


@routes.get("/api/templates/{id}/evals/runs/{runId}", auth="K", response=EvalRun)
async def eval_run(request: web.Request) -> web.Response:
    """One case's run: its task, answer, tokens and events."""
    match = request.match_info
    return web.json_response(
        await services(request).evals.eval_run(principal(request), match["id"], match["runId"])
    )
