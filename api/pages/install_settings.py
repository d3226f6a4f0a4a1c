"""An install's other tabs: variables and secrets, security log, usage and spend (the schedule
tab: schedule.py)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from api.context import services
from api.pages.base import PageTable, Viewer, done, form, render
from api.pages.charts import bar_chart, rate_chart
from api.pages.install_view import heading
from svc.billing import BillingQuery
from svc.core import ServiceError, window_floor

routes = PageTable()
USAGE_DAYS = 30


@routes.get("/installs/{id}/settings")
async def settings_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Variables and secrets: names and whether each is set; a secret's value is never shown."""
    install = await services(request).installs.owned(viewer.principal, request.match_info["id"])
    definition = install["definition"]
    variables = install.get("variables") or {}
    held = set(install.get("secretsEncrypted") or {})
    return render(
        request,
        "install_settings.html",
        viewer,
        install=install,
        heading=await heading(request, install),
        tab="settings",
        variables=[{"name": n, "value": variables.get(n)} for n in definition.get("requiredVariables") or []],
        secrets=[{"name": n, "set": n in held} for n in definition.get("requiredSecrets") or []],
        extra_secrets=sorted(held - set(definition.get("requiredSecrets") or [])),
    )


@routes.post("/installs/{id}/variables")
async def set_variable(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Set one variable (the API merges it into the install's variables)."""
    data = await form(request)
    await services(request).installs.set_variables(
        viewer.principal, request.match_info["id"], {data.get("name", ""): data.get("value", "")}
    )
    return done(request, f"/installs/{request.match_info['id']}/settings")


@routes.post("/installs/{id}/secrets")
async def set_secret(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Set or replace one secret; the value is encrypted and never sent back."""
    data = await form(request)
    await services(request).installs.set_secrets(
        viewer.principal, request.match_info["id"], {data.get("name", ""): data.get("value", "")}
    )
    return done(request, f"/installs/{request.match_info['id']}/settings")


@routes.get("/installs/{id}/security")
async def security_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """The security log (its last 200 entries) filtered by decision, agent and host: the entries
    of GET /api/installs/:id/security/requests, from the same `SecurityLog.latest`."""
    svc = services(request)
    install = await svc.installs.owned(viewer.principal, request.match_info["id"])
    entries = await svc.security_log.latest(install["_id"], window_floor(install))
    filters = {name: request.query.get(name, "") for name in ("decision", "agent", "host")}
    shown = [
        e
        for e in entries
        if (not filters["decision"] or e.get("decision") == filters["decision"])
        and (not filters["agent"] or e.get("agentKey") == filters["agent"])
        and (not filters["host"] or filters["host"].lower() in str(e.get("hostname", "")).lower())
    ]
    return render(
        request,
        "security.html",
        viewer,
        install=install,
        heading=await heading(request, install),
        tab="security",
        entries=shown,
        filters=filters,
        agents=sorted({e.get("agentKey", "") for e in entries}),
        total=len(entries),
    )


@routes.get("/installs/{id}/usage")
async def usage_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Usage and spend this period: runs per day, success rate, tokens by agent, the bill so far."""
    svc = services(request)
    install = await svc.installs.owned(viewer.principal, request.match_info["id"])
    # The run counters (one per install and UTC day, one per agent all time) that analytics and
    # billing read, so the page costs the same with ten runs or a million.
    totals, tokens = await svc.run_analytics.install_usage(install["_id"], USAGE_DAYS)
    per_day = bar_chart(
        f"Runs per day (last {USAGE_DAYS} days)",
        [(day.isoformat()[5:], doc.get("runs", 0)) for day, doc in totals],
        failures=[float(doc.get("failed", 0)) for _, doc in totals],
    )
    success = rate_chart(
        "Success rate per day",
        [(day.isoformat()[5:], doc.get("runs", 0), doc.get("completed", 0)) for day, doc in totals],
    )
    by_agent = bar_chart("Tokens by agent (all time)", sorted(tokens.items()), unit=" tokens")
    spend: dict[str, Any] | None = None
    spend_error: str | None = None
    try:
        spend = await svc.usage.report(
            viewer.principal, BillingQuery(templateId=install["templateId"], installId=install["_id"])
        )
    except ServiceError as exc:
        spend_error = exc.message
    return render(
        request,
        "usage.html",
        viewer,
        install=install,
        heading=await heading(request, install),
        tab="usage",
        charts=[per_day, success, by_agent],
        spend=spend,
        spend_error=spend_error,
    )
