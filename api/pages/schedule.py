"""An install's schedule tab: the editor with its next fire times, fire now, enable and disable.

The form never throws away what the person typed: a value the API refuses (a time zone that
is not an IANA zone, a cron expression with six fields, a negative jitter) comes back as the
same form, filled in as it was sent, with the message beside the field it is about (400). The
next fire times are computed on the server, as the scheduler computes them, for whatever the
form holds: on load (the saved schedule, or the suggested one), and as you type.
"""

from __future__ import annotations

import difflib
from datetime import UTC, datetime
from functools import cache
from typing import Any
from zoneinfo import available_timezones

from aiohttp import web

from api.context import services
from api.pages.base import PageTable, Viewer, done, form, parse, render
from api.pages.install_view import heading
from svc.core import BadRequest, Document, utcnow
from svc.runtime import ScheduleBody, check_cron, check_timezone, next_fire

routes = PageTable()
PREVIEW_COUNT = 5
CONTROLS = ("catchupWindowSeconds", "jitterSeconds", "pauseOnFailure")
# What a new schedule's form holds: weekdays at nine, in UTC.
SUGGESTED = {
    "cronExpression": "0 9 * * 1-5",
    "timezone": "UTC",
    "label": "",
    "onBacklog": "skip",
    "enabled": "on",
    "bypassGates": "",
    **{name: "0" for name in CONTROLS},
}
FIELDS = tuple(SUGGESTED)


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


@cache
def zone_names() -> tuple[str, ...]:
    """The IANA zones this machine knows (the scheduler's list), read once."""
    return tuple(sorted(available_timezones()))


def zone_hint(zone: str) -> str:
    """`; did you mean Europe/Berlin?` for a mistyped zone name (nothing when none is close)."""
    close = difflib.get_close_matches(zone, zone_names(), n=2, cutoff=0.75)
    return f"; did you mean {' or '.join(close)}?" if close else ""


def preview(values: dict[str, str]) -> tuple[list[dict[str, str]], str | None]:
    """The fire times of what the form holds, or why there are none."""
    try:
        return fire_times(values["cronExpression"], values["timezone"] or "UTC"), None
    except BadRequest as exc:
        hint = zone_hint(values["timezone"]) if exc.message.startswith("timezone:") else ""
        return [], exc.message + hint


def number(value: str) -> int | str | None:
    """A form's whole number for the API's strict models (blank: unset; other text: refused there)."""
    value = value.strip()
    if not value:
        return None
    return int(value) if value.isdigit() else value


def saved_values(schedule: Document | None) -> dict[str, str]:
    """The form's fields for the saved schedule (the suggested one when there is none)."""
    if schedule is None:
        return dict(SUGGESTED)
    return {
        "cronExpression": schedule["cronExpression"],
        "timezone": schedule["timezone"],
        "label": schedule.get("label") or "",
        "onBacklog": schedule["onBacklog"],
        "enabled": "on" if schedule["enabled"] else "",
        "bypassGates": "on" if schedule["bypassGates"] else "",
        **{name: str(schedule.get(name, 0)) for name in CONTROLS},
    }


async def editor(
    request: web.Request,
    viewer: Viewer,
    values: dict[str, str] | None = None,
    errors: dict[str, str] | None = None,
) -> web.Response:
    """The schedule tab, its form holding `values` (the saved schedule when None)."""
    svc = services(request)
    install = await svc.installs.owned(viewer.principal, request.match_info["id"])
    current = await svc.schedules.get(viewer.principal, install["_id"])
    shown = values if values is not None else saved_values(current["schedule"])
    times, problem = preview(shown)
    return render(
        request,
        "schedule.html",
        viewer,
        status=400 if errors else 200,
        install=install,
        heading=await heading(request, install),
        schedule=current["schedule"],
        values=shown,
        errors=errors or {},
        timezones=current["timezones"],
        preview=times,
        preview_error=problem,
        tab="schedule",
    )


@routes.get("/installs/{id}/schedule")
async def schedule_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """The schedule editor with the next five fire times."""
    return await editor(request, viewer)


@routes.get("/installs/{id}/schedule/preview")
async def schedule_preview(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """The next five fire times of a cron expression in a zone (for the editor, as you type);
    an invalid expression or zone answers 200 with `error`, as the definition validator does."""
    await services(request).installs.owned(viewer.principal, request.match_info["id"])
    times, problem = preview(
        {"cronExpression": request.query.get("cron", ""), "timezone": request.query.get("timezone", "")}
    )
    # A half-typed expression is a normal state of the editor, not a failed request.
    return web.json_response({"error": problem, "fireTimes": []} if problem else {"fireTimes": times})


@routes.post("/installs/{id}/schedule")
async def save_schedule(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Create or change the schedule (or delete it with the delete button). A refused value
    answers the same form, as typed, with the message at its field."""
    data = await form(request)
    try:
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
    except BadRequest as exc:
        field, _, message = exc.message.partition(": ")
        if field == "timezone":
            message += zone_hint(data.get("timezone", ""))
        errors = {field: message} if field in FIELDS and message else {"form": exc.message}
        typed: dict[str, Any] = {name: data.get(name, "") for name in FIELDS}
        return await editor(request, viewer, typed, errors)
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
