"""Deployer pages: home (my installs), an install's runs (live), a run's detail, gates and drafts.

Every page starts from `installs.owned(...)` with the viewer's session principal,
the same reach check the JSON console uses, so a stranger gets the 404 page.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import aiohttp_jinja2
from aiohttp import web
from pymongo import DESCENDING

from api.context import services
from api.pages.base import PageTable, Viewer, done, form, parse, render
from api.sse import relay
from plugins import tracing
from svc.core import BadRequest, Document, NotFound, aware, iso, utcnow
from svc.installs import CreateInstallBody
from svc.runtime import MAX_DRAFT_ID, BulkBody, DraftEdit, RejectBody, RunBody

routes = PageTable()
RUNS_SHOWN = 50
LIVE_POLL_S = 1.0
FIRST_WINDOW = timedelta(hours=1)
WIDEST_WINDOW = timedelta(days=365)
STEPS_READ = 1000


async def acting(request: web.Request, viewer: Viewer) -> dict[str, str | None]:
    """Who acted, for pipeline events (as the JSON console records it)."""
    return {"actor_id": viewer.user_id, "actor_email": viewer.user["email"]}


def run_row(doc: Document) -> dict[str, Any]:
    """A pipeline run as the runs table shows it."""
    return {
        "id": doc["_id"],
        "status": doc["status"],
        "source": doc.get("source", "run"),
        "agentKey": doc.get("agentKey"),
        "pausedAtGate": doc.get("pausedAtGate") if doc["status"] == "paused" else None,
        "inputTokens": doc.get("inputTokens"),
        "outputTokens": doc.get("outputTokens"),
        "errorMessage": doc.get("errorMessage"),
        "createdAt": iso(doc.get("createdAt")),
        "endedAt": iso(doc.get("endedAt")),
    }


async def latest_runs(request: web.Request, install_id: str, limit: int = RUNS_SHOWN) -> list[dict[str, Any]]:
    """The install's newest runs, read through widening time windows.

    On the embedded store a query costs what its filter matches, whatever the limit,
    so "newest 50 of all runs" would read every run of the install. The first window
    is an hour; when it holds fewer than `limit` runs, the next one is sized from the
    rate it saw (with a margin), at least four times wider, and the last has no bound.
    A busy install is served by its last hour, a quiet one by one wider read.
    """
    runs = services(request).store["pipeline_runs"]
    now = utcnow()
    window: timedelta | None = FIRST_WINDOW
    docs: list[Document] = []
    while True:
        query: Document = {"installId": install_id}
        if window is not None:
            query["createdAt"] = {"$gte": now - window}
        docs = (
            await runs.find(query, {"state": 0})
            .sort([("createdAt", DESCENDING), ("_id", DESCENDING)])
            .limit(limit)
            .to_list(limit)
        )
        if len(docs) >= limit or window is None:
            break
        wider = max(window * 4, window * (limit / max(len(docs), 1)) * 1.5)
        window = wider if wider < WIDEST_WINDOW else None
    return [run_row(doc) for doc in docs]


async def gate_state(request: web.Request, viewer: Viewer, install: Document) -> dict[str, Any]:
    """What waits for a decision: paused runs, the draft queue with targets, pending targets."""
    svc = services(request)
    install_id = install["_id"]
    has_gates = bool(install["definition"].get("gates"))
    if not has_gates:
        return {"hasGates": False, "paused": [], "drafts": [], "targets": {"records": [], "total": 0}}
    paused = (
        await svc.store["pipeline_runs"]
        .find({"installId": install_id, "status": "paused"}, {"state": 0})
        .sort([("pausedAt", 1), ("_id", 1)])
        .to_list(20)
    )
    drafts = await svc.outreach.drafts(viewer.principal, install_id)
    # The draft resource leaves out its recipient; the queue shows it, so the page does too.
    recipients = {
        doc["_id"]: doc.get("recipientEmail")
        for doc in await svc.store["drafts"]
        .find(
            {"_id": {"$in": [d["draft"]["id"] for d in drafts]}, "installId": install_id},
            {"recipientEmail": 1},
        )
        .to_list(None)
    }
    for item in drafts:
        item["recipientEmail"] = recipients.get(item["draft"]["id"])
    return {
        "hasGates": True,
        "paused": [run_row(doc) for doc in paused],
        "drafts": drafts,
        "targets": await svc.outreach.queue(viewer.principal, install_id, "target-review"),
    }


@routes.get("/")
async def home(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """My installs: status, platform, version, last and next run, what is missing."""
    svc = services(request)
    personal = {row["id"]: row for row in await svc.installs.list(viewer.principal)}
    managed = {row["id"]: row for row in await svc.installs.mine(viewer.user_id)}
    rows: list[dict[str, Any]] = []
    for install_id in dict.fromkeys([*managed, *personal]):
        base = personal.get(install_id, {})
        extra = managed.get(install_id, {})
        rows.append(
            {
                "id": install_id,
                "name": extra.get("pipelineName") or base.get("templateName"),
                "orgSlug": extra.get("orgSlug"),
                "status": extra.get("status") or base.get("status"),
                "platform": extra.get("platform") or base.get("platform"),
                "templateVersion": base.get("templateVersion"),
                "lastRunAt": extra.get("lastRunAt"),
                "nextRunAt": extra.get("nextRunAt"),
                "missingVariables": extra.get("missingVariables", []),
                "missingSecrets": extra.get("missingSecrets", []),
            }
        )
    orgs = await svc.orgs.mine(viewer.user_id)
    return render(request, "home.html", viewer, installs=rows, orgs=orgs)


@routes.post("/installs/new")
async def create_install(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Install a published template on the managed runtime, with its variables."""
    data = await form(request)
    variables = {k[4:]: v for k, v in data.items() if k.startswith("var.") and v}
    fields: dict[str, Any] = {"templateId": data.get("templateId", ""), "platform": "svc"}
    if variables:
        fields["variables"] = variables
    # Managed installs take their secrets afterwards, on the install's settings tab.
    body = parse(CreateInstallBody, fields)
    created = await services(request).installs.create(viewer.principal, body)
    install_id = created.get("installId") or created.get("id")
    return done(request, f"/installs/{install_id}", installId=install_id)


@routes.get("/installs/{id}")
async def install_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """One install: run form, runs (live), gates and drafts, links to its settings."""
    svc = services(request)
    install = await svc.installs.owned(viewer.principal, request.match_info["id"])
    runs = await latest_runs(request, install["_id"])
    gates = await gate_state(request, viewer, install)
    return render(request, "install.html", viewer, install=install, runs=runs, gates=gates, tab="runs")


@routes.get("/installs/{id}/live")
async def live(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Server-sent events: the runs table and the gate panel, sent again whenever they change."""
    svc = services(request)
    install = await svc.installs.owned(viewer.principal, request.match_info["id"])
    env = aiohttp_jinja2.get_env(request.app)
    rows_template = env.get_template("partials/run_rows.html")
    gate_template = env.get_template("partials/gates.html")

    async def changes() -> AsyncIterator[dict[str, Any]]:
        seen_runs: object = None
        seen_gates: object = None
        # Stop as soon as the browser has gone (the keep-alive write would notice only later).
        while request.transport is not None and not request.transport.is_closing():
            runs = await latest_runs(request, install["_id"])
            gates = await gate_state(request, viewer, install)
            marks = [(r["id"], r["status"]) for r in runs]
            gate_marks = (
                [r["id"] for r in gates["paused"]],
                [(d["draft"]["id"], d["draft"]["status"]) for d in gates["drafts"]],
                gates["targets"]["total"],
            )
            event: dict[str, Any] = {}
            if marks != seen_runs:
                seen_runs = marks
                event["runs"] = rows_template.render(runs=runs, install=install)
            if gate_marks != seen_gates:
                seen_gates = gate_marks
                event["gates"] = gate_template.render(gates=gates, install=install, viewer=viewer)
            if event:
                yield event
            await asyncio.sleep(LIVE_POLL_S)

    return await relay(request, changes())


@routes.get("/installs/{id}/runs/{runId}")
async def run_detail(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """A run: each agent step, tokens per agent, the run's security-log entries, its errors."""
    svc = services(request)
    install = await svc.installs.owned(viewer.principal, request.match_info["id"])
    run = await svc.store["pipeline_runs"].find_one(
        {"_id": request.match_info["runId"], "installId": install["_id"]}, {"state": 0}
    )
    if run is None:
        raise NotFound("Run not found")
    # The run's own time span bounds the reads (see latest_runs on what a query costs).
    span = {"$gte": aware(run["createdAt"]) - timedelta(seconds=1)}
    if run.get("endedAt") is not None:
        span["$lte"] = aware(run["endedAt"]) + timedelta(minutes=1)
    # runId is matched here rather than in the filter: with it the embedded store's planner
    # leaves the (installId, createdAt) index, and the span holds few other runs' rows.
    steps = sorted(
        (
            doc
            for doc in await svc.store["agent_runs"]
            .find({"installId": install["_id"], "createdAt": span})
            .to_list(STEPS_READ)
            if doc["runId"] == run["_id"]
        ),
        key=lambda doc: (aware(doc.get("startedAt") or doc["createdAt"]), aware(doc["createdAt"])),
    )
    tokens: dict[str, dict[str, int]] = {}
    for step in steps:
        agent = tokens.setdefault(step["agentKey"], {"input": 0, "output": 0, "steps": 0})
        agent["input"] += step.get("inputTokens") or 0
        agent["output"] += step.get("outputTokens") or 0
        agent["steps"] += 1
    requests = [
        doc
        for doc in await svc.store["security_requests"]
        .find({"installId": install["_id"], "createdAt": span})
        .sort([("createdAt", 1)])
        .to_list(STEPS_READ)
        if doc["runId"] == run["_id"]
    ]
    return render(
        request,
        "run.html",
        viewer,
        install=install,
        run=run_row(run),
        steps=steps,
        tokens=tokens,
        requests=requests,
        trace=tracing.detail_fields(run.get("trace"), svc.settings.tracing.viewer_url),  # tracing (#33)
        tab="runs",
    )


@routes.post("/installs/{id}/run")
async def start_run(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Run the team on a task (synchronous, like POST /api/installs/:id/run)."""
    svc = services(request)
    body = parse(RunBody, await form(request))
    result = await svc.run_service.run(viewer.principal, request.match_info["id"], body)
    return done(request, f"/installs/{request.match_info['id']}", runId=result.get("runId"))


@routes.post("/installs/{id}/continue")
async def continue_run(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Continue the paused run past its gate (optionally bypassing later gates)."""
    svc = services(request)
    data = await form(request)
    await svc.run_service.continue_run(
        viewer.principal,
        request.match_info["id"],
        data.get("bypassGates") in ("true", "on", "1"),
        await acting(request, viewer),
        data.get("runId") or None,
    )
    return done(request, f"/installs/{request.match_info['id']}")


@routes.post("/installs/{id}/cancel")
async def cancel_run(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Cancel the active run."""
    await services(request).run_service.cancel(viewer.principal, request.match_info["id"])
    return done(request, f"/installs/{request.match_info['id']}")


def draft_number(request: web.Request) -> int:
    """The draft id of the path; 404 when it is not one."""
    try:
        value = int(request.match_info["draftId"])
    except ValueError:
        raise NotFound("Draft not found") from None
    if not 0 < value <= MAX_DRAFT_ID:
        raise NotFound("Draft not found")
    return value


@routes.post("/installs/{id}/drafts/{draftId}/edit")
async def edit_draft(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Change a draft's subject and body."""
    body = parse(DraftEdit, await form(request))
    await services(request).outreach.edit(
        viewer.principal, request.match_info["id"], draft_number(request), body
    )
    return done(request, f"/installs/{request.match_info['id']}#drafts")


@routes.post("/installs/{id}/drafts/{draftId}/approve")
async def approve_draft(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Approve a draft; like the API, the paused pipeline resumes once no draft awaits a decision."""
    install_id = request.match_info["id"]
    actor = await acting(request, viewer)
    await services(request).run_service.approve_draft(
        viewer.principal, install_id, draft_number(request), actor
    )
    return done(request, f"/installs/{install_id}#drafts")


@routes.post("/installs/{id}/drafts/{draftId}/reject")
async def reject_draft(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Reject a draft with an optional note for the writing agent."""
    data = await form(request)
    body = parse(RejectBody, {"note": data.get("note") or None})
    await services(request).outreach.reject(
        viewer.principal,
        request.match_info["id"],
        draft_number(request),
        body.note,
        await acting(request, viewer),
    )
    return done(request, f"/installs/{request.match_info['id']}#drafts")


@routes.post("/installs/{id}/drafts/{draftId}/recall")
async def recall_draft(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Take an approved, unsent draft back to the queue."""
    await services(request).outreach.recall(viewer.principal, request.match_info["id"], draft_number(request))
    return done(request, f"/installs/{request.match_info['id']}#drafts")


@routes.post("/installs/{id}/drafts/bulk")
async def bulk_drafts(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Approve or reject the ticked drafts, or every pending one (`scope=pending`)."""
    data = await request.post()
    ids = [
        int(value)
        for key, value in data.items()
        if key == "ids" and isinstance(value, str) and value.isdigit()
    ]
    if data.get("scope") == "pending":
        selector: dict[str, Any] = {"filter": {"status": "pending_approval"}}
    elif ids:
        selector = {"ids": ids}
    else:
        raise BadRequest("Tick at least one draft")
    body = parse(BulkBody, {"action": str(data.get("action", "")), **selector})
    count = await services(request).outreach.bulk(viewer.principal, request.match_info["id"], body)
    return done(request, f"/installs/{request.match_info['id']}#drafts", count=count)
