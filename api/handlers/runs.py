"""Observability: run reports pushed by platform integrations, and run analytics for builders."""

from __future__ import annotations

from aiohttp import web
from pydantic import BaseModel

from api.context import principal, services
from api.routing import RouteTable
from svc.runs import IngestBody, RunsQuery, RunsReport

routes = RouteTable()


class IngestReply(BaseModel):
    """POST /api/runs/ingest: the same answer for a first report and for every repeat of it."""

    ok: bool
    runId: str


@routes.post("/api/runs/ingest", auth="I", body=IngestBody, response=IngestReply)
async def ingest_run(request: web.Request, body: IngestBody) -> web.Response:
    """Record a finished run reported by a platform integration (install token; deduplicated by runId)."""
    install_id = principal(request).install_id
    assert install_id is not None  # an install token always names its install
    return web.json_response(await services(request).runs.ingest(install_id, body))


@routes.get("/api/runs", auth="K", query=RunsQuery, response=RunsReport)
async def run_analytics(request: web.Request, query: RunsQuery) -> web.Response:
    """Run totals by platform and agent over all runs of a template you own, and its newest runs."""
    return web.json_response(await services(request).run_analytics.report(principal(request), query))
