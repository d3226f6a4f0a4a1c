"""Cron arithmetic of schedules: checking expressions and zones, the next fire on a zone's wall
clock, jitter, and the missed fires a catch-up window keeps (svc/runtime/schedules.py)."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from functools import cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import CroniterError, croniter

from svc.core import BadRequest

MAX_CATCHUP_FIRES = 20  # at most this many missed fires are caught up at once (the oldest in the window)


@cache
def timezones() -> list[str]:
    """Every IANA zone name this machine knows, sorted."""
    return sorted(available_timezones())


def check_cron(expression: str) -> str:
    """A 5-field cron expression (minute hour day month weekday); 400 with the reason otherwise."""
    fields = expression.split()
    if len(fields) != 5:
        raise BadRequest(f"cronExpression: needs 5 fields (minute hour day month weekday), got {len(fields)}")
    expression = " ".join(fields)
    try:
        croniter(expression).get_next(datetime)  # also refuses dates that never come (30 February)
    except (CroniterError, ValueError, KeyError) as exc:
        raise BadRequest(f"cronExpression: {exc}") from None
    return expression


def check_timezone(name: str) -> ZoneInfo:
    """The zone; 400 for a name that is not an IANA zone."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise BadRequest(f"timezone: unknown IANA time zone {name!r}") from None


def next_fire(expression: str, zone: str, after: datetime) -> datetime:
    """The first fire strictly after `after`, in UTC, computed on the zone's wall clock.

    When clocks go back, a wall time that occurs twice fires once; when they go
    forward, a wall time that does not exist fires at the first moment after it.
    """
    local_after = after.astimezone(ZoneInfo(zone))
    schedule = croniter(expression, local_after)
    candidate: datetime = schedule.get_next(datetime)
    while candidate.replace(tzinfo=None) <= local_after.replace(tzinfo=None):
        candidate = schedule.get_next(datetime)
    return candidate.astimezone(UTC)


def jittered(fire: datetime, jitter_s: int) -> datetime:
    """The fire time delayed by a random part of the schedule's jitter (none when 0)."""
    return fire + timedelta(seconds=secrets.randbelow(jitter_s + 1)) if jitter_s else fire


def missed_fires(
    expression: str, zone: str, due_at: datetime, now: datetime, window_s: int
) -> list[datetime]:
    """The fires from `due_at` up to `now` that are still inside the catch-up window, oldest first
    (at most MAX_CATCHUP_FIRES, the newest of them; just the due fire when there is no window)."""
    if window_s <= 0:
        return [due_at]
    earliest = now - timedelta(seconds=window_s)
    fires, at = [], due_at
    while at <= now:
        if at >= earliest:
            fires.append(at)
        at = next_fire(expression, zone, at)
    return fires[-MAX_CATCHUP_FIRES:]
