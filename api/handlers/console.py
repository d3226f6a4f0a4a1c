"""The pipeline operator console: feeds and run control (K/S; the caller's installs only)."""

from __future__ import annotations

from aiohttp import web
from pydantic import BaseModel, Field

from api.context import principal, services
from api.routing import RouteTable
from svc.events import Events, agent_runs
from svc.schedules import ScheduleBody, ToggleBody

routes = RouteTable()


class RunLogQuery(BaseModel):
    """Query of GET /api/installs/:id/run-log."""

    days: int = Field(default=7, ge=1, le=30)


class AgentRunsQuery(BaseModel):
    """Query of GET /api/installs/:id/agent-runs."""

    limit: int = Field(default=50, ge=1, le=200)


@routes.get("/api/installs/{id}/events", auth="K/S")
async def events(request: web.Request) -> web.Response:
    """The install's last 100 pipeline events, newest first."""
    svc = services(request)
    install = await svc.installs.owned(principal(request), request.match_info["id"])
    return web.json_response({"events": await Events(svc.store).latest(install["_id"])})


@routes.get("/api/installs/{id}/run-log", auth="K/S", query=RunLogQuery)
async def run_log(request: web.Request, query: RunLogQuery) -> web.Response:
    """Completed and failed steps per day, oldest first."""
    svc = services(request)
    install = await svc.installs.owned(principal(request), request.match_info["id"])
    return web.json_response({"days": await Events(svc.store).run_log(install["_id"], query.days)})


@routes.get("/api/installs/{id}/agent-runs", auth="K/S", query=AgentRunsQuery)
async def list_agent_runs(request: web.Request, query: AgentRunsQuery) -> web.Response:
    """The install's agent steps, newest first."""
    svc = services(request)
    install = await svc.installs.owned(principal(request), request.match_info["id"])
    return web.json_response({"runs": await agent_runs(svc.store, install["_id"], query.limit)})


@routes.post("/api/installs/{id}/cancel-run", auth="K/S")
async def cancel_run(request: web.Request) -> web.Response:
    """Cancel the active run (404 when none is active)."""
    result = await services(request).run_service.cancel(principal(request), request.match_info["id"])
    return web.json_response(result)


@routes.get("/api/installs/{id}/schedule", auth="K/S")
async def get_schedule(request: web.Request) -> web.Response:
    """The install's schedule (or null) and the IANA time zones."""
    svc = services(request)
    return web.json_response(await svc.schedules.get(principal(request), request.match_info["id"]))


@routes.patch("/api/installs/{id}/schedule", auth="K/S", body=ScheduleBody)
async def set_schedule(request: web.Request, body: ScheduleBody) -> web.Response:
    """Create or change the schedule; cronExpression null deletes it."""
    svc = services(request)
    return web.json_response(await svc.schedules.update(principal(request), request.match_info["id"], body))


@routes.patch("/api/installs/{id}/schedule/toggle", auth="K/S", body=ToggleBody)
async def toggle_schedule(request: web.Request, body: ToggleBody) -> web.Response:
    """Switch the schedule on or off."""
    svc = services(request)
    result = await svc.schedules.toggle(principal(request), request.match_info["id"], body.enabled)
    return web.json_response(result)
