"""Deployer pages: my installs (also the home page), an install's runs (live), a run's detail, gates
and drafts.

Every page starts from `installs.owned(...)` with the viewer's session principal,
the same reach check the JSON console uses, so a stranger gets the 404 page.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from api.context import services
from api.pages.base import PageTable, Viewer, done, form, parse, render
from api.pages.install_live import snapshot
from api.pages.install_view import badge, heading
from svc.core import BadRequest
from svc.installs import CreateInstallBody
from svc.runtime import BulkBody, ContinueBody, DraftEdit, RejectBody, RunBody, draft_number

routes = PageTable()


async def acting(request: web.Request, viewer: Viewer) -> dict[str, str | None]:
    """Who acted, for pipeline events (as the JSON console records it)."""
    return {"actor_id": viewer.user_id, "actor_email": viewer.user["email"]}


def draft_id(request: web.Request) -> int:
    """The draft id of the path (`svc.runtime.draft_number`: 404 when it is not one)."""
    return draft_number(request.match_info["draftId"])


@routes.get("/")
@routes.get("/installs")
async def home(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """My installs (the nav's "Installs"; also the home page): state, platform, version, last and
    next run, what is missing. The same service calls as GET /api/installs and /api/installs/mine."""
    svc = services(request)
    personal = {row["id"]: row for row in await svc.installs.list(viewer.principal)}
    managed = {row["id"]: row for row in await svc.installs.mine(viewer.user_id)}
    semvers = await svc.templates.semvers(
        (row["templateId"], row["templateVersion"]) for row in personal.values() if row.get("templateId")
    )
    rows: list[dict[str, Any]] = []
    for install_id in dict.fromkeys([*managed, *personal]):
        base = personal.get(install_id, {})
        extra = managed.get(install_id, {})
        state = extra.get("status") or base.get("status")
        rows.append(
            {
                "id": install_id,
                "name": extra.get("pipelineName") or base.get("templateName"),
                "orgSlug": extra.get("orgSlug"),
                "state": badge({"status": state}, None),
                "platform": extra.get("platform") or base.get("platform"),
                "version": semvers.get((base.get("templateId", ""), base.get("templateVersion", 0))),
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
    """One install: run form, runs (live: install_live.py), gates and drafts, links to its settings."""
    svc = services(request)
    install = await svc.installs.owned(viewer.principal, request.match_info["id"])
    current = await snapshot(request, install, fresh=True)
    return render(
        request,
        "install.html",
        viewer,
        install=install,
        runs=current.runs,
        gates=current.gates,
        heading=await heading(request, install, current.runs),
        tab="runs",
    )


@routes.get("/installs/{id}/runs/{runId}")
async def run_detail(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """A run: its task and the team's answer, each step with its model, tokens per agent, the
    run's security-log entries. The same `RunDetail.get` as GET /api/installs/:id/runs/:runId."""
    svc = services(request)
    install = await svc.installs.owned(viewer.principal, request.match_info["id"])
    detail = await svc.run_detail.get(viewer.principal, install["_id"], request.match_info["runId"])
    return render(
        request,
        "run.html",
        viewer,
        install=install,
        run=detail,
        heading=await heading(request, install),
        tab="runs",
    )


@routes.post("/installs/{id}/run")
async def start_run(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Start a run on a task without waiting for it (POST /api/installs/:id/run with `wait: false`):
    the answer is the queued run, which the page then follows in its live runs table."""
    svc = services(request)
    body = parse(RunBody, {"task": (await form(request)).get("task", ""), "wait": False})
    result = await svc.run_service.run(viewer.principal, request.match_info["id"], body)
    return done(
        request, f"/installs/{request.match_info['id']}", runId=result["runId"], status=result["status"]
    )


@routes.post("/installs/{id}/continue")
async def continue_run(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Continue the paused run past its gate (optionally bypassing later gates)."""
    svc = services(request)
    data = await form(request)
    body = parse(
        ContinueBody,
        {
            "bypassGates": data.get("bypassGates") in ("true", "on", "1"),
            "runId": data.get("runId") or None,
            "decision": data.get("decision") or None,
            "note": data.get("note") or None,
        },
    )
    await svc.run_service.continue_run(
        viewer.principal,
        request.match_info["id"],
        body.bypassGates,
        await acting(request, viewer),
        body.runId,
        body.decision,
        body.note,
    )
    return done(request, f"/installs/{request.match_info['id']}")


@routes.post("/installs/{id}/cancel")
async def cancel_run(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Cancel the active run."""
    await services(request).run_service.cancel(viewer.principal, request.match_info["id"])
    return done(request, f"/installs/{request.match_info['id']}")


@routes.post("/installs/{id}/drafts/{draftId}/edit")
async def edit_draft(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Change a draft's subject and body."""
    body = parse(DraftEdit, await form(request))
    await services(request).outreach.edit(viewer.principal, request.match_info["id"], draft_id(request), body)
    return done(request, f"/installs/{request.match_info['id']}#drafts")


@routes.post("/installs/{id}/drafts/{draftId}/approve")
async def approve_draft(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Approve a draft; like the API, the paused pipeline resumes once no draft awaits a decision."""
    install_id = request.match_info["id"]
    actor = await acting(request, viewer)
    await services(request).run_service.approve_draft(viewer.principal, install_id, draft_id(request), actor)
    return done(request, f"/installs/{install_id}#drafts")


@routes.post("/installs/{id}/drafts/{draftId}/reject")
async def reject_draft(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Reject a draft with an optional note for the writing agent."""
    data = await form(request)
    body = parse(RejectBody, {"note": data.get("note") or None})
    await services(request).outreach.reject(
        viewer.principal,
        request.match_info["id"],
        draft_id(request),
        body.note,
        await acting(request, viewer),
    )
    return done(request, f"/installs/{request.match_info['id']}#drafts")


@routes.post("/installs/{id}/drafts/{draftId}/recall")
async def recall_draft(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Take an approved, unsent draft back to the queue."""
    await services(request).outreach.recall(viewer.principal, request.match_info["id"], draft_id(request))
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
