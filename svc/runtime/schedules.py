"""Cron schedules of installs: reading and changing them (the API side), and what a scheduled
run's end does to its schedule.

A schedule fires on its cron expression, on its zone's wall clock (svc/runtime/cron.py);
the scheduler's tick fires each due fire exactly once (svc/runtime/schedule_fires.py).
Optional jitter delays each fire by up to `jitterSeconds`; a catch-up window
(`catchupWindowSeconds`) runs missed fires after a downtime; `pauseOnFailure` pauses the
schedule after that many failed scheduled runs in a row (docs/console.md).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field
from pymongo import ReturnDocument

from svc.core import (
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
    iso,
    utcnow,
)
from svc.identity import Principal
from svc.installs import Installs
from svc.runtime.cron import check_cron, check_timezone, jittered, next_fire, timezones
from svc.runtime.pipeline_events import Events
from svc.runtime.schedule_fires import SchedulerCore

MAX_CATCHUP_WINDOW_S = 7 * 24 * 3600
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
