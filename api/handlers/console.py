"""The pipeline operator console: feeds and run control (K/S; the caller's installs only)."""

from __future__ import annotations

from aiohttp import web
from pydantic import BaseModel, Field

from api.context import principal, services
from api.routing import RouteTable
from api.schemas import (
    AgentRunList,
    BulkReply,
    CancelRunReply,
    DraftEdited,
    DraftList,
    EventList,
    GateQueue,
    Ok,
    RunLog,
    ScheduleSaved,
    ScheduleToggled,
    ScheduleTriggered,
    ScheduleView,
    TimelinePage,
)
from api.timeline import timeline_response
from svc.core import TimelineQuery, window_floor
from svc.runtime import (
    BulkBody,
    ContinueBody,
    DraftEdit,
    Events,
    RejectBody,
    ScheduleBody,
    ToggleBody,
    agent_runs,
    draft_number,
)

routes = RouteTable()


class RunLogQuery(BaseModel):
    """Query of GET /api/installs/:id/run-log."""

    days: int = Field(default=7, ge=1, le=30)


class AgentRunsQuery(BaseModel):
    """Query of GET /api/installs/:id/agent-runs."""

    limit: int = Field(default=50, ge=1, le=200)


@routes.get("/api/installs/{id}/events", auth="K/S", response=EventList)
async def events(request: web.Request) -> web.Response:
    """The install's last 100 pipeline events, newest first."""
    svc = services(request)
    install = await svc.installs.owned(principal(request), request.match_info["id"])
    events = await Events(svc.store).latest(install["_id"], window_floor(install))
    return web.json_response({"events": events})


@routes.get("/api/installs/{id}/run-log", auth="K/S", query=RunLogQuery, response=RunLog)
async def run_log(request: web.Request, query: RunLogQuery) -> web.Response:
    """Completed and failed steps per day, oldest first."""
    svc = services(request)
    install = await svc.installs.owned(principal(request), request.match_info["id"])
    return web.json_response({"days": await Events(svc.store).run_log(install["_id"], query.days)})


@routes.get("/api/installs/{id}/agent-runs", auth="K/S", query=AgentRunsQuery, response=AgentRunList)
async def list_agent_runs(request: web.Request, query: AgentRunsQuery) -> web.Response:
    """The install's agent steps, newest first."""
    svc = services(request)
    install = await svc.installs.owned(principal(request), request.match_info["id"])
    runs = await agent_runs(svc.store, install["_id"], query.limit, window_floor(install))
    return web.json_response({"runs": runs})


@routes.post("/api/installs/{id}/cancel-run", auth="K/S", response=CancelRunReply)
async def cancel_run(request: web.Request) -> web.Response:
    """Cancel the active run (404 when none is active)."""
    result = await services(request).run_service.cancel(principal(request), request.match_info["id"])
    return web.json_response(result)


@routes.get("/api/installs/{id}/schedule", auth="K/S", response=ScheduleView)
async def get_schedule(request: web.Request) -> web.Response:
    """The install's schedule (or null) and the IANA time zones."""
    svc = services(request)
    return web.json_response(await svc.schedules.get(principal(request), request.match_info["id"]))


@routes.patch("/api/installs/{id}/schedule", auth="K/S", body=ScheduleBody, response=ScheduleSaved)
async def set_schedule(request: web.Request, body: ScheduleBody) -> web.Response:
    """Create or change the schedule; cronExpression null deletes it."""
    svc = services(request)
    return web.json_response(await svc.schedules.update(principal(request), request.match_info["id"], body))


@routes.patch("/api/installs/{id}/schedule/toggle", auth="K/S", body=ToggleBody, response=ScheduleToggled)
async def toggle_schedule(request: web.Request, body: ToggleBody) -> web.Response:
    """Switch the schedule on or off."""
    svc = services(request)
    result = await svc.schedules.toggle(principal(request), request.match_info["id"], body.enabled)
    return web.json_response(result)


@routes.get("/api/installs/{id}/audit", auth="K/S", query=TimelineQuery, response=TimelinePage)
async def install_timeline(request: web.Request, query: TimelineQuery) -> web.Response:
    """The install's audit timeline (gates, egress verdicts, keys, secrets, schedules, billing)."""
    events, following = await services(request).installs.timeline(
        principal(request), request.match_info["id"], query
    )
    return timeline_response(request, events, following)


@routes.post("/api/installs/{id}/schedule/trigger", auth="K/S", response=ScheduleTriggered)
async def trigger_schedule(request: web.Request) -> web.Response:
    """Run the scheduled task now, as a schedule run (the backlog policy applies)."""
    result = await services(request).schedules.trigger(principal(request), request.match_info["id"])
    return web.json_response(result)


async def acting(request: web.Request) -> dict[str, str | None]:
    """Who acted, for events: the person behind the session or key."""
    caller = principal(request)
    if caller.user_id is None:
        return {"actor_id": None, "actor_email": None}
    user = await services(request).accounts.get_user(caller.user_id)
    return {"actor_id": user["_id"], "actor_email": user["email"]}


def draft_id(request: web.Request) -> int:
    """The draft id of the path (`svc.runtime.draft_number`: 404 when it is not one)."""
    return draft_number(request.match_info["draftId"])


@routes.post("/api/installs/{id}/continue", auth="K/S", body=ContinueBody, response=Ok)
async def continue_run(request: web.Request, body: ContinueBody) -> web.Response:
    """Resume the paused pipeline from the step after its gate."""
    result = await services(request).run_service.continue_run(
        principal(request),
        request.match_info["id"],
        body.bypassGates,
        await acting(request),
        body.runId,
        body.decision,
        body.note,
    )
    return web.json_response(result)


@routes.get("/api/installs/{id}/gates/{name}/queue", auth="K/S", response=GateQueue)
async def gate_queue(request: web.Request) -> web.Response:
    """Records waiting at a gate: {records, total}."""
    outreach = services(request).outreach
    return web.json_response(
        await outreach.queue(principal(request), request.match_info["id"], request.match_info["name"])
    )


@routes.get("/api/installs/{id}/drafts", auth="K/S", response=DraftList)
async def list_drafts(request: web.Request) -> web.Response:
    """Outreach drafts with their targets, newest first."""
    drafts = await services(request).outreach.drafts(principal(request), request.match_info["id"])
    return web.json_response({"drafts": drafts})


@routes.patch("/api/installs/{id}/drafts/{draftId}", auth="K/S", body=DraftEdit, response=DraftEdited)
async def edit_draft(request: web.Request, body: DraftEdit) -> web.Response:
    """Edit a draft's subject and/or body (editedAt is stamped)."""
    draft = await services(request).outreach.edit(
        principal(request), request.match_info["id"], draft_id(request), body
    )
    return web.json_response({"ok": True, "draft": draft})


@routes.post("/api/installs/{id}/drafts/{draftId}/approve", auth="K/S", response=Ok)
async def approve_draft(request: web.Request) -> web.Response:
    """Approve a draft; the pipeline resumes at once when no draft awaits a decision."""
    actor = await acting(request)
    await services(request).run_service.approve_draft(
        principal(request), request.match_info["id"], draft_id(request), actor
    )
    return web.json_response({"ok": True})


@routes.post("/api/installs/{id}/drafts/{draftId}/reject", auth="K/S", body=RejectBody, response=Ok)
async def reject_draft(request: web.Request, body: RejectBody) -> web.Response:
    """Reject a draft; the note is fed back to the writing agent on its next run."""
    svc = services(request)
    await svc.outreach.reject(
        principal(request), request.match_info["id"], draft_id(request), body.note, await acting(request)
    )
    return web.json_response({"ok": True})


@routes.post("/api/installs/{id}/drafts/{draftId}/recall", auth="K/S", response=Ok)
async def recall_draft(request: web.Request) -> web.Response:
    """Take an approved draft back to pending_approval (409 once sent)."""
    await services(request).outreach.recall(principal(request), request.match_info["id"], draft_id(request))
    return web.json_response({"ok": True})


@routes.post("/api/installs/{id}/drafts/bulk", auth="K/S", body=BulkBody, response=BulkReply)
async def bulk_drafts(request: web.Request, body: BulkBody) -> web.Response:
    """Approve, reject, requeue or archive many drafts (by ids or by a status filter)."""
    count = await services(request).outreach.bulk(principal(request), request.match_info["id"], body)
    return web.json_response({"ok": True, "count": count})
