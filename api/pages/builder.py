"""Builder pages: my templates, the definition editor, lifecycle actions, versions and diffs, analytics.

Actions call the same `Templates` methods as `/api/templates/*` with the viewer's
session principal (owner checks are the service's), so a page can do exactly
what the API lets the same person do.
"""

from __future__ import annotations

import difflib
import json
from collections import Counter
from typing import Any

from aiohttp import web

from api.context import services
from api.pages.base import PageTable, Viewer, done, form, parse, render
from api.pages.charts import bar_chart, rate_chart
from svc.core import BadRequest, ServiceError
from svc.runs import RunsQuery
from svc.templates import (
    CreateTemplateBody,
    PricingBody,
    PublishBody,
    RollbackBody,
    UpdateTemplateBody,
    diff_summary,
)

routes = PageTable()


def definition_of(request: web.Request, data: dict[str, str]) -> dict[str, Any]:
    """The definition field of a form, or 400 with the first error at its path."""
    text = data.get("definition", "")
    report = services(request).definitions.check_text(text)
    if report.errors:
        raise BadRequest(f"{report.errors[0].path}: {report.errors[0].message}")
    parsed: dict[str, Any] = json.loads(text)
    return parsed


@routes.get("/templates")
async def my_templates(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """My templates, by state: drafts (and version drafts), published, archived (`Templates.mine`)."""
    groups: dict[str, list[dict[str, Any]]] = {"draft": [], "published": [], "archived": []}
    for template in await services(request).templates.mine(viewer.principal):
        groups.setdefault(template["status"], []).append(template)
    return render(request, "templates.html", viewer, groups=groups)


@routes.get("/templates/new")
async def new_template_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """The form for a new template, with a one-agent starter definition."""
    return render(
        request,
        "template_new.html",
        viewer,
        error=None,
        values={"visibility": "team"},
        definition=json.dumps(services(request).definitions.starter(), indent=2),
    )


@routes.post("/templates/new")
async def create_template(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Create the draft and open it."""
    data = await form(request)
    try:
        body = parse(
            CreateTemplateBody,
            {
                "slug": data.get("slug", ""),
                "name": data.get("name", ""),
                "description": data.get("description", ""),
                "visibility": data.get("visibility", "team"),
                "definition": definition_of(request, data),
            },
        )
        created = await services(request).templates.create(viewer.principal, body)
    except ServiceError as exc:
        return render(
            request,
            "template_new.html",
            viewer,
            status=400,
            error=exc.message,
            values=data,
            definition=data.get("definition", ""),
        )
    return done(request, f"/templates/{created['id']}", id=created["id"])


@routes.post("/templates/validate")
async def validate(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Check the editor's text as it changes: the answer of POST /api/templates/validate
    (`{valid, errors, warnings}`, each at its path), from the same `Definitions.check`."""
    report = services(request).definitions.check_text((await form(request)).get("definition", ""))
    return web.json_response(report.as_dict())


@routes.get("/templates/{id}")
async def template_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """A template: its editor (drafts), lifecycle actions and version history."""
    svc = services(request)
    # GET /api/templates/:id's answer, and whether the viewer owns it (the actions are its owner's).
    template, owned = await svc.templates.viewed(viewer.principal, request.match_info["id"])
    versions = await svc.templates.versions(viewer.principal, template["id"])
    draft_of = None
    if template.get("parentTemplateId"):
        draft_of = template["parentTemplateId"]
    # Evals (docs/evals.md): the owner's scorecard history, every version's.
    scorecards = (
        (await svc.evals.history(viewer.principal, template["id"], None))["scorecards"] if owned else []
    )
    return render(
        request,
        "template.html",
        viewer,
        template=template,
        owned=owned,
        versions=versions,
        draft_of=draft_of,
        scorecards=scorecards,
        definition=json.dumps(template["definition"], indent=2),
        error=None,
    )


@routes.post("/templates/{id}/save")
async def save_draft(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Save the draft's definition and change log."""
    data = await form(request)
    body = parse(
        UpdateTemplateBody,
        {"definition": definition_of(request, data), "changeLog": data.get("changeLog") or None},
    )
    await services(request).templates.update_draft(viewer.principal, request.match_info["id"], body)
    return done(request, f"/templates/{request.match_info['id']}")


@routes.post("/templates/{id}/publish")
async def publish(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Publish a draft (a version draft publishes into its parent). From the editor, what the
    editor holds is saved first, so what the builder sees is what is published."""
    data = await form(request)
    svc = services(request)
    change_log = data.get("changeLog") or None
    if "definition" in data:
        edited = parse(
            UpdateTemplateBody, {"definition": definition_of(request, data), "changeLog": change_log}
        )
        await svc.templates.update_draft(viewer.principal, request.match_info["id"], edited)
    body = parse(PublishBody, {"changeLog": change_log})
    published = await svc.templates.publish(viewer.principal, request.match_info["id"], body)
    return done(request, f"/templates/{published['id']}", id=published["id"])


@routes.post("/templates/{id}/new-version")
async def new_version(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Open a version draft of a published template."""
    draft = await services(request).templates.new_version(viewer.principal, request.match_info["id"])
    return done(request, f"/templates/{draft['id']}", id=draft["id"])


@routes.post("/templates/{id}/rollback")
async def rollback(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Open a version draft holding an earlier version's definition."""
    version = (await form(request)).get("version", "")
    body = parse(RollbackBody, {"version": int(version) if version.isdigit() else version})
    draft = await services(request).templates.rollback(viewer.principal, request.match_info["id"], body)
    return done(request, f"/templates/{draft['id']}", id=draft["id"])


@routes.post("/templates/{id}/fork")
async def fork(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Copy a published template into a draft of mine."""
    copy = await services(request).templates.fork(viewer.principal, request.match_info["id"])
    return done(request, f"/templates/{copy['id']}", id=copy["id"])


@routes.post("/templates/{id}/archive")
async def archive(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Archive a published template (installs keep running)."""
    await services(request).templates.archive(viewer.principal, request.match_info["id"])
    return done(request, f"/templates/{request.match_info['id']}")


@routes.post("/templates/{id}/pricing")
async def set_pricing(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Set the pricing model and price (free, per run, per 1K tokens), as PATCH /api/billing/pricing."""
    data = await form(request)
    model = data.get("pricingModel", "free")
    price = data.get("priceUsdCents", "").strip()
    body = parse(
        PricingBody,
        {
            "templateId": request.match_info["id"],
            "pricingModel": model,
            "priceUsdCents": None
            if model == "free" or not price
            else int(price)
            if price.isdigit()
            else price,
        },
    )
    await services(request).templates.set_pricing(viewer.principal, body)
    return done(request, f"/templates/{request.match_info['id']}")


@routes.get("/templates/{id}/diff")
async def diff(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """A readable diff between two published versions, with the bump it classifies as: the
    versions GET /api/templates/:id/versions/:a/diff/:b compares (`Portability.pair`)."""
    try:
        old_version, new_version_ = int(request.query.get("from", "")), int(request.query.get("to", ""))
    except ValueError:
        raise BadRequest("from and to must be version numbers") from None
    template, old, new = await services(request).portability.pair(
        viewer.principal, request.match_info["id"], str(old_version), str(new_version_)
    )
    summary = diff_summary(old["definition"], new["definition"])
    lines = list(
        difflib.unified_diff(
            json.dumps(old["definition"], indent=2, sort_keys=True).splitlines(),
            json.dumps(new["definition"], indent=2, sort_keys=True).splitlines(),
            f"v{old['semver']}",
            f"v{new['semver']}",
            lineterm="",
            n=3,
        )
    )
    return render(
        request, "diff.html", viewer, template=template, old=old, new=new, summary=summary, lines=lines
    )


@routes.get("/templates/{id}/analytics")
async def analytics(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Runs per day and platform, success rate, tokens by agent, and the builder's earnings."""
    svc = services(request)
    template = await svc.templates.get(viewer.principal, request.match_info["id"])
    report = await svc.run_analytics.report(viewer.principal, RunsQuery(templateId=template["id"], limit=500))
    per_day: Counter[str] = Counter()
    failed_per_day: Counter[str] = Counter()
    for run in report["runs"]:
        day = str(run.get("createdAt") or "")[:10]
        per_day[day] += 1
        if run.get("status") == "failed":
            failed_per_day[day] += 1
    days = sorted(per_day)[-30:]
    charts = [
        bar_chart(
            "Runs per day (newest 500 runs)",
            [(d[5:], per_day[d]) for d in days],
            failures=[float(failed_per_day[d]) for d in days],
        ),
        bar_chart("Runs by platform", [(p["platform"], p["totalRuns"]) for p in report["byPlatform"]]),
        rate_chart(
            "Success rate by platform",
            [(p["platform"], p["totalRuns"], p["totalRuns"] - p["failedRuns"]) for p in report["byPlatform"]],
        ),
        bar_chart(
            "Tokens by agent",
            [(a["agentKey"], a["inputTokens"] + a["outputTokens"]) for a in report["byAgent"]],
            unit=" tokens",
        ),
    ]
    mine: dict[str, Any] | None = None
    total: int | None = None
    earnings_error: str | None = None
    try:
        earnings = await svc.charges.earnings(viewer.user_id)
        mine = next((row for row in earnings["byTemplate"] if row["templateId"] == template["id"]), None)
        total = earnings["totalBuilderAmountCents"]
    except ServiceError as exc:  # no payment provider configured: the page still shows usage
        earnings_error = exc.message
    return render(
        request,
        "analytics.html",
        viewer,
        template=template,
        summary=report["summary"],
        charts=charts,
        earnings=mine,
        total_earnings=total,
        earnings_error=earnings_error,
    )
