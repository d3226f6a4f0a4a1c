"""An install's other tabs: schedule editor, variables and secrets, security log, usage and spend."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web

from api.context import services
from api.pages.base import PageTable, Viewer, done, form, parse, render
from api.pages.charts import bar_chart, rate_chart
from api.pages.install_view import heading
from svc.billing import BillingQuery
from svc.core import BadRequest, ServiceError, aware, utcnow
from svc.runtime import ScheduleBody, check_cron, check_timezone, next_fire

routes = PageTable()
PREVIEW_COUNT = 5
CONTROLS = ("catchupWindowSeconds", "jitterSeconds", "pauseOnFailure")


def number(value: str) -> int | str | None:
    """A form's whole number for the API's strict models (blank: unset; other text: refused there)."""
    value = value.strip()
    if not value:
        return None
    return int(value) if value.isdigit() else value


USAGE_DAYS = 30
MAX_AGENT_COUNTERS = 500


def fire_times(
    expression: str, zone: str, count: int = PREVIEW_COUNT, now: datetime | None = None
) -> list[dict[str, str]]:
    """The next fire times, computed exactly as the scheduler computes them (DST included),
    each shown on the zone's wall clock with its UTC offset and in UTC."""
    expression = check_cron(expression)
    tz = check_timezone(zone)
    moments: list[dict[str, str]] = []
    after = now or utcnow()
    for _ in range(count):
        after = next_fire(expression, zone, after)
        local = after.astimezone(tz)
        moments.append(
            {
                "local": local.strftime("%a %Y-%m-%d %H:%M"),
                "offset": local.strftime("%z")[:3] + ":" + local.strftime("%z")[3:],
                "zoneName": local.tzname() or zone,
                "utc": after.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            }
        )
    return moments


@routes.get("/installs/{id}/schedule")
async def schedule_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """The schedule editor with the next five fire times."""
    svc = services(request)
    install = await svc.installs.owned(viewer.principal, request.match_info["id"])
    current = await svc.schedules.get(viewer.principal, install["_id"])
    schedule = current["schedule"]
    preview: list[dict[str, str]] = []
    if schedule is not None:
        preview = fire_times(schedule["cronExpression"], schedule["timezone"])
    return render(
        request,
        "schedule.html",
        viewer,
        install=install,
        heading=await heading(request, install),
        schedule=schedule,
        timezones=current["timezones"],
        preview=preview,
        tab="schedule",
    )


@routes.get("/installs/{id}/schedule/preview")
async def schedule_preview(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """The next five fire times of a cron expression in a zone (for the editor, as you type);
    an invalid expression or zone answers 200 with `error`, as the definition validator does."""
    await services(request).installs.owned(viewer.principal, request.match_info["id"])
    try:
        times = fire_times(request.query.get("cron", ""), request.query.get("timezone", "UTC") or "UTC")
    except BadRequest as exc:
        # A half-typed expression is a normal state of the editor, not a failed request.
        return web.json_response({"error": exc.message, "fireTimes": []})
    return web.json_response({"fireTimes": times})


@routes.post("/installs/{id}/schedule")
async def save_schedule(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Create or change the schedule (or delete it with the delete button)."""
    data = await form(request)
    if data.get("delete"):
        body = parse(ScheduleBody, {"cronExpression": None})
    else:
        body = parse(
            ScheduleBody,
            {
                "cronExpression": data.get("cronExpression", ""),
                "label": data.get("label") or None,
                "enabled": data.get("enabled") == "on",
                "onBacklog": data.get("onBacklog") or "skip",
                "timezone": data.get("timezone") or "UTC",
                "bypassGates": data.get("bypassGates") == "on",
                **{name: number(data.get(name, "")) for name in CONTROLS},
            },
        )
    await services(request).schedules.update(viewer.principal, request.match_info["id"], body)
    return done(request, f"/installs/{request.match_info['id']}/schedule")


@routes.post("/installs/{id}/schedule/trigger")
async def trigger_schedule(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Fire the schedule now, as its next fire would (POST /api/installs/:id/schedule/trigger)."""
    await services(request).schedules.trigger(viewer.principal, request.match_info["id"])
    return done(request, f"/installs/{request.match_info['id']}")


@routes.post("/installs/{id}/schedule/toggle")
async def toggle_schedule(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Switch the schedule on or off."""
    data = await form(request)
    await services(request).schedules.toggle(
        viewer.principal, request.match_info["id"], data.get("enabled") == "true"
    )
    return done(request, f"/installs/{request.match_info['id']}/schedule")


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
    """The security log (its last 200 entries) filtered by decision, agent and host."""
    svc = services(request)
    install = await svc.installs.owned(viewer.principal, request.match_info["id"])
    entries = await svc.security_log.latest(install["_id"])
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
    today = utcnow().astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    first = today - timedelta(days=USAGE_DAYS - 1)
    counters = svc.store["run_stats"]
    by_day = {
        aware(doc["start"]).date(): doc
        for doc in await counters.find(
            {"kind": "day", "installId": install["_id"], "start": {"$gte": first}}
        ).to_list(USAGE_DAYS + 1)
    }
    days = [(first + timedelta(days=n)).date() for n in range(USAGE_DAYS)]
    totals = [(day, by_day.get(day, {})) for day in days]
    per_day = bar_chart(
        f"Runs per day (last {USAGE_DAYS} days)",
        [(day.isoformat()[5:], doc.get("runs", 0)) for day, doc in totals],
        failures=[float(doc.get("failed", 0)) for _, doc in totals],
    )
    success = rate_chart(
        "Success rate per day",
        [(day.isoformat()[5:], doc.get("runs", 0), doc.get("completed", 0)) for day, doc in totals],
    )
    tokens: dict[str, int] = defaultdict(int)
    for doc in await counters.find({"kind": "total", "installId": install["_id"]}).to_list(
        MAX_AGENT_COUNTERS
    ):
        tokens[doc.get("agentKey") or "—"] += int(doc.get("inputTokens", 0)) + int(doc.get("outputTokens", 0))
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
