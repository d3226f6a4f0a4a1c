"""Cron schedules of installs, and the scheduler's tick that fires them exactly once.

A fire is claimed with one conditional update that moves `nextRunAt` from the due
time to the next one, so of several schedulers (API processes, a restarted
scheduler) exactly one fires it. The next time is computed from *now*: a service
that was down past several fire times fires once on return, not once per miss,
unless the schedule has a catch-up window (`catchupWindowSeconds`): then each
missed fire still inside the window is run once, oldest first, as far as the
backlog policy allows. Optional jitter delays each fire by up to `jitterSeconds`;
`pauseOnFailure` pauses the schedule after that many failed scheduled runs in a
row (docs/console.md).
"""

from __future__ import annotations

import logging
import secrets
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import CroniterError, croniter
from pydantic import Field
from pymongo import ReturnDocument

from plugins import tracing
from svc.core import (
    LAG_BUCKETS,
    BadRequest,
    Batch,
    Conflict,
    Document,
    NotFound,
    RequestBody,
    Runtime,
    Store,
    Timeline,
    actor_of,
    aware,
    iso,
    new_id,
    observe_metric,
    utcnow,
)
from svc.identity import Principal
from svc.installs import Installs, ready_versions
from svc.runtime import ledger
from svc.runtime.pipeline_events import Events

log = logging.getLogger(__name__)

CLAIM_BATCH = 200
# A run waiting at a gate still occupies its install.
ACTIVE = ("queued", "starting", "running", "paused")
MAX_CATCHUP_WINDOW_S = 7 * 24 * 3600
MAX_CATCHUP_FIRES = 20  # at most this many missed fires are caught up at once (the oldest in the window)
MAX_JITTER_S = 3600
MAX_PAUSE_ON_FAILURE = 100


class ScheduleBody(RequestBody):
    """PATCH /api/installs/:id/schedule (cronExpression is required; null deletes)."""

    cronExpression: str | None = Field(max_length=200)
    label: str | None = Field(default=None, max_length=200)
    enabled: bool | None = None
    onBacklog: Literal["skip", "queue"] | None = None
    timezone: str | None = Field(default=None, max_length=64)
    bypassGates: bool | None = None
    catchupWindowSeconds: int | None = Field(default=None, ge=0, le=MAX_CATCHUP_WINDOW_S)
    jitterSeconds: int | None = Field(default=None, ge=0, le=MAX_JITTER_S)
    pauseOnFailure: int | None = Field(default=None, ge=0, le=MAX_PAUSE_ON_FAILURE)


class ToggleBody(RequestBody):
    """PATCH /api/installs/:id/schedule/toggle."""

    enabled: bool


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


def view(doc: Document) -> dict[str, Any]:
    """The Schedule resource (the spec's fields, then the controls: catch-up, jitter, pause)."""
    return {
        "cronExpression": doc["cronExpression"],
        "label": doc.get("label"),
        "enabled": doc["enabled"],
        "onBacklog": doc["onBacklog"],
        "timezone": doc["timezone"],
        "bypassGates": doc["bypassGates"],
        "lastRunAt": iso(doc.get("lastRunAt")),
        "nextRunAt": iso(doc.get("nextRunAt")) if doc["enabled"] else None,
        "catchupWindowSeconds": doc.get("catchupWindowSeconds", 0),
        "jitterSeconds": doc.get("jitterSeconds", 0),
        "pauseOnFailure": doc.get("pauseOnFailure", 0),
        "consecutiveFailures": doc.get("consecutiveFailures", 0),
        "pausedNote": doc.get("pausedNote"),
    }


# How many run ids a schedule remembers having counted (`note_scheduled_outcome`): enough for
# one settlement batch sent again.
OUTCOMES_KEPT = 50


def note_scheduled_outcome(batch: Batch, install_id: str, run_id: str, ok: bool) -> None:
    """Count a scheduled run's outcome, as an operation of the run's settlement batch: a success
    resets the failures in a row, a failure adds one; once per run however often the batch is
    sent (the schedule remembers the runs it counted)."""
    change: Document = {"$push": {"outcomes": {"$each": [run_id], "$slice": -OUTCOMES_KEPT}}}
    if ok:
        change["$set"] = {"consecutiveFailures": 0}
    else:
        change["$inc"] = {"consecutiveFailures": 1}
    batch.update("schedules", {"_id": install_id, "outcomes": {"$ne": run_id}}, change)


async def pause_if_failing(store: Store, install_id: str, error: str | None) -> None:
    """Pause the schedule after `pauseOnFailure` failures in a row (after a failed run's outcome was
    counted); a schedule already paused is left alone, so running this twice pauses it once."""
    doc = await store["schedules"].find_one({"_id": install_id})
    limit = (doc or {}).get("pauseOnFailure") or 0
    if doc is None or not limit or doc.get("consecutiveFailures", 0) < limit or not doc["enabled"]:
        return
    failures = doc["consecutiveFailures"]
    note = f"Paused after {failures} failed scheduled runs in a row (last: {error or 'failed'})"
    paused = await store["schedules"].update_one(
        {"_id": install_id, "enabled": True},
        {"$set": {"enabled": False, "pausedNote": note, "updatedAt": utcnow()}},
    )
    if paused.modified_count:
        await Timeline(store).record(
            "schedule", "schedule.paused", install_id=install_id, meta={"reason": note}
        )
        await Events(store).emit(install_id, "schedule_paused", meta={"reason": note, "failures": failures})


class Schedules:
    """Reading and changing schedules (the API side)."""

    def __init__(self, store: Store, installs: Installs, runtime: Runtime | None) -> None:
        self.store = store
        self.installs = installs
        self.core = SchedulerCore(store, runtime)

    async def get(self, principal: Principal, install_id: str) -> dict[str, Any]:
        """{schedule or null, timezones}."""
        await self.installs.owned(principal, install_id)
        doc = await self.store["schedules"].find_one({"_id": install_id})
        return {"schedule": view(doc) if doc else None, "timezones": timezones()}

    async def update(self, principal: Principal, install_id: str, body: ScheduleBody) -> dict[str, Any]:
        """Create, change or (cronExpression null) delete the schedule."""
        install = await self.installs.owned(principal, install_id)
        if not self.installs.traits(install["platform"]).managed:
            raise BadRequest(
                f"schedules run managed (svc) installs; this install is on {install['platform']}"
            )
        if body.cronExpression is None:
            await self.store["schedules"].delete_one({"_id": install_id})
            await self._audit(principal, install_id, "schedule.deleted", {})
            return {"ok": True, "schedule": None}
        current = await self.store["schedules"].find_one({"_id": install_id}) or {}
        sent = body.model_dump(exclude_unset=True)
        doc = {
            "cronExpression": check_cron(body.cronExpression),
            "label": sent.get("label", current.get("label")),
            "enabled": sent.get("enabled")
            if sent.get("enabled") is not None
            else current.get("enabled", True),
            "onBacklog": sent.get("onBacklog") or current.get("onBacklog", "skip"),
            "timezone": sent.get("timezone") or current.get("timezone", "UTC"),
            "bypassGates": sent.get("bypassGates")
            if sent.get("bypassGates") is not None
            else current.get("bypassGates", False),
        }
        for control in ("catchupWindowSeconds", "jitterSeconds", "pauseOnFailure"):
            value = sent.get(control)
            doc[control] = value if value is not None else current.get(control, 0)
        check_timezone(doc["timezone"])
        doc["nextRunAt"] = jittered(
            next_fire(doc["cronExpression"], doc["timezone"], utcnow()), doc["jitterSeconds"]
        )
        updated = await self.store["schedules"].find_one_and_update(
            {"_id": install_id},
            {
                "$set": {**doc, "updatedAt": utcnow()},
                "$setOnInsert": {"lastRunAt": None, "createdAt": utcnow()},
            },
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
        assert updated is not None  # upserted
        await self._audit(principal, install_id, "schedule.changed", {"fields": sorted(sent)})
        return {"ok": True, "schedule": view(updated)}

    async def toggle(self, principal: Principal, install_id: str, enabled: bool) -> dict[str, Any]:
        """Switch the schedule on or off (a re-enabled schedule fires from now on)."""
        await self.installs.owned(principal, install_id)
        doc = await self.store["schedules"].find_one({"_id": install_id})
        if doc is None:
            raise NotFound("No schedule for this install")
        changes: dict[str, Any] = {"enabled": enabled, "updatedAt": utcnow()}
        if enabled:
            # Switching it on again clears a pause and its failure count.
            changes.update(pausedNote=None, consecutiveFailures=0)
            changes["nextRunAt"] = jittered(
                next_fire(doc["cronExpression"], doc["timezone"], utcnow()), doc.get("jitterSeconds", 0)
            )
        await self.store["schedules"].update_one({"_id": install_id}, {"$set": changes})
        await self._audit(principal, install_id, "schedule.enabled" if enabled else "schedule.disabled", {})
        return {"ok": True, "enabled": enabled}

    async def trigger(self, principal: Principal, install_id: str) -> dict[str, Any]:
        """Run the scheduled task now (with the schedule's bypassGates), counted as a schedule run.

        The backlog policy applies as to any fire; 404 without a schedule, 409 when disabled.
        """
        await self.installs.owned(principal, install_id)
        doc = await self.store["schedules"].find_one({"_id": install_id})
        if doc is None:
            raise NotFound("No schedule for this install")
        if not doc["enabled"]:
            raise Conflict("The schedule is disabled; enable it to trigger it")
        meta = await self.core.fire_now(doc, utcnow())
        await self._audit(principal, install_id, "schedule.triggered", {"runId": meta.get("runId")})
        return {
            "ok": True,
            "runId": meta.get("runId"),
            "queued": bool(meta.get("queued")),
            "skipped": bool(meta.get("skipped")),
            "reason": meta.get("reason"),
        }

    async def _audit(self, principal: Principal, install_id: str, action: str, meta: dict[str, Any]) -> None:
        actor = actor_of(principal.user_id, principal.via)
        await Timeline(self.store).record("schedule", action, install_id=install_id, actor=actor, meta=meta)


class SchedulerCore:
    """One scheduler tick: claim due fires, start (or skip, or queue) their runs."""

    def __init__(self, store: Store, runtime: Runtime | None) -> None:
        self.store = store
        self.runtime = runtime
        self.events = Events(store)
        self.handover = ledger.HandOver(store, runtime)

    async def tick(self, now: datetime | None = None) -> int:
        """Fire what is due; start queued runs whose install is free. How many fires were claimed."""
        now = now or utcnow()
        fired = 0
        while (
            due := await self.store["schedules"]
            .find({"enabled": True, "nextRunAt": {"$lte": now}})
            .to_list(CLAIM_BATCH)
        ):
            claimed = await self._claim(due, now)
            fired += len(claimed)
            lags = [max(0.0, (now - aware(due_at)).total_seconds()) for _, due_at in claimed]
            await observe_metric(self.store, "scheduler_lag_seconds", {}, lags, LAG_BUCKETS)
            await self._fire(claimed, now)
        await self._start_queued()
        return fired

    async def _claim(self, due: list[Document], now: datetime) -> list[tuple[Document, datetime]]:
        """Claim the due fires: one conditional update per group of equal schedules.

        The filter names the due time, so a fire another scheduler moved on is not claimed
        again; the claim token then tells which documents this tick claimed.
        """
        token = new_id()
        groups: dict[tuple[datetime, str, str, int], list[str]] = {}
        for schedule in due:
            key = (
                schedule["nextRunAt"],
                schedule["cronExpression"],
                schedule["timezone"],
                schedule.get("jitterSeconds", 0),
            )
            groups.setdefault(key, []).append(schedule["_id"])
        scheduled_for: dict[str, datetime] = {}
        for (due_at, expression, zone, jitter), ids in groups.items():
            await self.store["schedules"].update_many(
                {"_id": {"$in": ids}, "enabled": True, "nextRunAt": due_at},
                {
                    "$set": {
                        "nextRunAt": jittered(next_fire(expression, zone, now), jitter),
                        "lastRunAt": now,
                        "claim": token,
                    }
                },
            )
            scheduled_for.update(dict.fromkeys(ids, due_at))
        claimed = await self.store["schedules"].find({"claim": token}).to_list(None)
        return [(schedule, scheduled_for[schedule["_id"]]) for schedule in claimed]

    async def fire_now(self, schedule: Document, now: datetime) -> dict[str, Any]:
        """One manual fire of a schedule (trigger now); the meta of its scheduler_run event."""
        metas = await self._fire([(schedule, now)], now, manual=True)
        return metas[0]

    async def _fire(
        self, claimed: list[tuple[Document, datetime]], now: datetime, manual: bool = False
    ) -> list[dict[str, Any]]:
        """Start, queue or skip each claimed fire (and the missed fires a catch-up window keeps);
        a few batched writes for the whole batch. The meta of each scheduler_run event."""
        if not claimed:
            return []
        ids = [schedule["_id"] for schedule, _ in claimed]
        # install id -> the version its runs are queued on (issue 34: pinned runs)
        ready = await ready_versions(self.store, ids)
        active = (
            await self.store["pipeline_runs"]
            .find(
                {"installId": {"$in": ids}, "status": {"$in": list(ACTIVE)}},
                {"installId": 1, "status": 1, "source": 1},
            )
            .to_list(None)
        )
        busy = {run["installId"] for run in active}
        waiting = {
            run["installId"]
            for run in active
            if run["status"] == "queued" and run.get("source") == "schedule"
        }
        runs: list[Document] = []
        events: list[Document] = []
        metas: list[dict[str, Any]] = []
        for schedule, due_at in claimed:
            install_id = schedule["_id"]
            window = 0 if manual else schedule.get("catchupWindowSeconds", 0)
            fires = missed_fires(schedule["cronExpression"], schedule["timezone"], due_at, now, window)
            for fire_at in fires:
                meta: dict[str, Any] = {"scheduledFor": iso(fire_at)}
                if manual:
                    meta["manual"] = True
                if window and len(fires) > 1:
                    meta["caughtUp"] = True
                queue_more = schedule["onBacklog"] == "queue" and window > 0
                if install_id not in ready:
                    meta.update(runId=None, skipped=True, reason="install not ready")
                elif install_id in busy and (
                    schedule["onBacklog"] == "skip" or (install_id in waiting and not queue_more)
                ):
                    reason = (
                        "a run was active"
                        if schedule["onBacklog"] == "skip"
                        else "a scheduled run is already queued"
                    )
                    meta.update(runId=None, skipped=True, reason=reason)
                else:
                    queued = install_id in busy
                    meta.update(runId=new_id(), queued=queued)
                    # Later fires of this batch find the install busy (and this run waiting).
                    busy.add(install_id)
                    if queued:
                        waiting.add(install_id)
                metas.append(meta)
                events.append(self.events.document(install_id, "scheduler_run", meta=meta))
                if meta["runId"] is None:
                    continue
                # The scheduled run's trace starts at its fire (tracing, #33).
                with tracing.schedule_fire(install_id, iso(fire_at), manual):
                    runs.append(
                        ledger.new_run(
                            install_id,
                            schedule.get("label") or "Scheduled run",
                            "schedule",
                            _id=meta["runId"],
                            bypassGates=bool(schedule.get("bypassGates")),
                            scheduledFor=fire_at,
                            createdAt=now,
                            templateVersion=ready[install_id],  # issue 34: pinned runs
                            # Handed over now; a run waiting for its install to be free gets it later.
                            handoffAt=None if meta["queued"] else now,
                        )
                    )
        await ledger.enqueue_many(self.store, runs)
        await self.store["pipeline_events"].insert_many(events)
        await self.handover.all_now([run for run in runs if run["handoffAt"] is not None])
        return metas

    async def _start_queued(self) -> None:
        """Hand over scheduled runs that waited for an active run of their install to finish."""
        queued = (
            await self.store["pipeline_runs"]
            .find({"status": "queued", "source": "schedule", "handoffAt": None})
            .sort("createdAt", 1)
            .to_list(CLAIM_BATCH)
        )
        for run in queued:
            busy = await self.store["pipeline_runs"].count_documents(
                {
                    "installId": run["installId"],
                    "$or": [
                        {"status": {"$in": ["starting", "running"]}},
                        {"status": "queued", "handoffAt": {"$ne": None}},
                    ],
                },
                limit=1,
            )
            if not busy:
                await self._start(run)

    async def _start(self, run: Document) -> None:
        now = utcnow()
        if not await ledger.release(self.store, run["_id"], now):
            return  # another scheduler handed it over
        await self.handover.now({**run, "handoffAt": now})
