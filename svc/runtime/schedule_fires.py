"""The scheduler's tick: claim each due fire once, and start, queue or skip its runs.

A fire is claimed with one conditional update that moves `nextRunAt` from the due
time to the next one, so of several schedulers (API processes, a restarted
scheduler) exactly one fires it. The claim also adds a note of the fire to the
schedule's `firing` list, and the write that stores the fire's runs and events takes
that note out last: a tick cut between the two (a database error, a crash) leaves the
note, and a later tick fires it again (`RETRY_FIRE_AFTER_S`), even when the schedule's
next fire was claimed meanwhile. The runs and events of a fire have ids fixed by the
schedule and the fire time, so a fire sent again stores each once: a fire's records are
written at least once and stored exactly once.

The next time is computed from *now*: a service that was down past several fire
times fires once on return, not once per miss, unless the schedule has a catch-up
window (`catchupWindowSeconds`): then each missed fire still inside the window is
run once, oldest first, as far as the backlog policy allows (svc/runtime/cron.py).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any, Literal

from plugins import tracing
from svc.core import (
    LAG_BUCKETS,
    Batch,
    Document,
    Runtime,
    Store,
    aware,
    derived_id,
    iso,
    new_id,
    observe_metric,
    utcnow,
)
from svc.installs import ready_versions
from svc.runtime import ledger
from svc.runtime.cron import jittered, missed_fires, next_fire
from svc.runtime.handover import HandOver
from svc.runtime.pipeline_events import Events

log = logging.getLogger(__name__)

CLAIM_BATCH = 200
# A run waiting at a gate still occupies its install.
ACTIVE = ("queued", "starting", "running", "paused")
# A claimed fire whose runs and events are still unwritten after this long is fired again: far
# longer than a tick takes, so a tick still writing them is not overtaken.
RETRY_FIRE_AFTER_S = 60
# A cut fire is tried this many times in all (its first tick included), then given up: a fire
# whose records cannot be stored at all must not be retried, and its notes kept, forever.
MAX_FIRE_ATTEMPTS = 5


def fire_id(install_id: str, fire_at: datetime, record: Literal["run", "event"]) -> str:
    """The id of the run or the `scheduler_run` event of a schedule's fire at `fire_at` (24 hex
    digits, the shape of every id): a fire sent again after a cut tick writes the same records."""
    return derived_id(install_id, "fire", iso(fire_at), record)


class SchedulerCore:
    """One scheduler tick: claim due fires, start (or skip, or queue) their runs."""

    def __init__(self, store: Store, runtime: Runtime | None) -> None:
        self.store = store
        self.runtime = runtime
        self.events = Events(store)
        self.handover = HandOver(store, runtime)

    async def tick(self, now: datetime | None = None) -> int:
        """Fire what is due (and what a cut tick left claimed); start queued runs whose install is
        free. How many fires were claimed."""
        now = now or utcnow()
        await self._fire_stranded(now)
        fired = 0
        while (
            due := await self.store["schedules"]
            .find({"enabled": True, "nextRunAt": {"$lte": now}})
            .to_list(CLAIM_BATCH)
        ):
            claimed, token = await self._claim(due, now)
            fired += len(claimed)
            lags = [max(0.0, (now - due_at).total_seconds()) for _, due_at, _ in claimed]
            await observe_metric(self.store, "scheduler_lag_seconds", {}, lags, LAG_BUCKETS)
            await self._fire([(schedule, fires) for schedule, _, fires in claimed], now, token)
        await self._start_queued()
        return fired

    async def _fire_stranded(self, now: datetime) -> None:
        """Fire again what a tick claimed but could not write (its note still in `firing`
        RETRY_FIRE_AFTER_S later), with the fire times the note holds: the same run and event
        ids. Each note is taken over with a new token of its own, in one write conditional on
        the `firing` list as it was read (a claim pushes to it, a fire's write pulls from it), so
        of two schedulers one takes it and no other note is lost or brought back. A schedule
        switched off since (or paused) drops its cut fires; a fire is tried MAX_FIRE_ATTEMPTS
        times in all, then given up (logged as an error)."""
        cutoff = now - timedelta(seconds=RETRY_FIRE_AFTER_S)
        stranded = (
            await self.store["schedules"].find({"firing.since": {"$lte": cutoff}}).to_list(CLAIM_BATCH)
        )
        for schedule in stranded:
            notes = schedule["firing"]
            stale = [note for note in notes if aware(note["since"]) <= cutoff]
            retaken = [
                {**note, "token": new_id(), "since": now, "attempts": note["attempts"] + 1}
                for note in stale
                if schedule["enabled"] and note["attempts"] < MAX_FIRE_ATTEMPTS
            ]
            kept = [note for note in notes if note not in stale]
            taken = await self.store["schedules"].update_one(
                {"_id": schedule["_id"], "firing": notes}, {"$set": {"firing": kept + retaken}}
            )
            if not taken.modified_count:
                continue  # another scheduler took them over, or a claim or a fire came between
            if len(retaken) < len(stale):
                why = "its schedule is off" if not schedule["enabled"] else f"{MAX_FIRE_ATTEMPTS} attempts"
                log.error("%d cut fire(s) given up: %s", len(stale) - len(retaken), why)
            for note in retaken:
                fires = [aware(at) for at in note["fires"]]
                log.warning("firing again a fire a cut tick left claimed (due %s)", iso(fires[0]))
                try:
                    await self._fire([(schedule, fires)], now, note["token"], again=True)
                except Exception as exc:  # the note stays: a later tick tries again
                    log.warning("a cut fire could not be fired again yet: %s", type(exc).__name__)

    async def _claim(
        self, due: list[Document], now: datetime
    ) -> tuple[list[tuple[Document, datetime, list[datetime]]], str]:
        """Claim the due fires: one conditional update per group of equal schedules. The claimed
        schedules, each with its due time and its fire times (the due one, and the missed fires
        its catch-up window keeps), and the claim's token.

        The filter names the due time, so a fire another scheduler moved on is not claimed
        again. Each claimed schedule keeps a note of the claim (in `firing`: the token, the fire
        times, since when) until the fire's records are written; the token then tells which
        documents this tick claimed.
        """
        token = new_id()
        groups: dict[tuple[datetime, str, str, int, int], list[str]] = {}
        for schedule in due:
            key = (
                schedule["nextRunAt"],
                schedule["cronExpression"],
                schedule["timezone"],
                schedule.get("jitterSeconds", 0),
                schedule.get("catchupWindowSeconds", 0),
            )
            groups.setdefault(key, []).append(schedule["_id"])
        fires_of: dict[str, tuple[datetime, list[datetime]]] = {}
        for (due_at, expression, zone, jitter, window), ids in groups.items():
            fires = missed_fires(expression, zone, aware(due_at), now, window)
            note = {"token": token, "fires": fires, "since": utcnow(), "attempts": 1}
            following = jittered(next_fire(expression, zone, now), jitter)
            await self.store["schedules"].update_many(
                {"_id": {"$in": ids}, "enabled": True, "nextRunAt": due_at},
                {
                    "$set": {"nextRunAt": following, "lastRunAt": now},
                    "$push": {"firing": note},
                },
            )
            fires_of.update(dict.fromkeys(ids, (aware(due_at), fires)))
        claimed = await self.store["schedules"].find({"firing.token": token}).to_list(None)
        return [(schedule, *fires_of[schedule["_id"]]) for schedule in claimed], token

    async def fire_now(self, schedule: Document, now: datetime) -> dict[str, Any]:
        """One manual fire of a schedule (trigger now); the meta of its scheduler_run event."""
        metas = await self._fire([(schedule, [now])], now, manual=True)
        return metas[0]

    async def _fire(
        self,
        claimed: list[tuple[Document, list[datetime]]],
        now: datetime,
        token: str | None = None,
        manual: bool = False,
        again: bool = False,
    ) -> list[dict[str, Any]]:
        """Start, queue or skip each claimed fire (a schedule and its fire times). The fires' runs
        and events, then the removal of the claims' notes (those of `token` in `firing`), are one
        ordered batch; the hand-over follows. `again`: a fire a cut tick left, whose records the
        cut tick may have stored: a stored event keeps the decision it records, and a stored run
        counts as started. The meta of each scheduler_run event."""
        if not claimed:
            return []
        ids = [schedule["_id"] for schedule, _ in claimed]
        stored: dict[str, Document] = {}
        decided: dict[str, dict[str, Any]] = {}
        if again:
            ids_of = [(schedule["_id"], at) for schedule, fires in claimed for at in fires]
            run_ids = [fire_id(install_id, at, "run") for install_id, at in ids_of]
            found = self.store["pipeline_runs"].find({"_id": {"$in": run_ids}}, {"handoffAt": 1})
            stored = {run["_id"]: run for run in await found.to_list(None)}
            event_ids = [fire_id(install_id, at, "event") for install_id, at in ids_of]
            events_found = self.store["pipeline_events"].find({"_id": {"$in": event_ids}}, {"meta": 1})
            decided = {event["_id"]: event["meta"] for event in await events_found.to_list(None)}
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
        active = [run for run in active if run["_id"] not in stored]
        busy = {run["installId"] for run in active}
        waiting = {
            run["installId"]
            for run in active
            if run["status"] == "queued" and run.get("source") == "schedule"
        }
        runs: list[Document] = []
        events: list[Document] = []
        metas: list[dict[str, Any]] = []
        for schedule, fires in claimed:
            install_id = schedule["_id"]
            window = 0 if manual else schedule.get("catchupWindowSeconds", 0)
            for fire_at in fires:
                run_id, event_id = (
                    (new_id(), new_id())
                    if manual
                    else (fire_id(install_id, fire_at, "run"), fire_id(install_id, fire_at, "event"))
                )
                if event_id in decided:  # the cut tick decided this fire and stored all of it
                    meta = decided[event_id]
                    metas.append(meta)
                    if meta.get("runId") is not None:
                        busy.add(install_id)
                        if meta.get("queued"):
                            waiting.add(install_id)
                    continue
                meta = {"scheduledFor": iso(fire_at)}
                if manual:
                    meta["manual"] = True
                if window and len(fires) > 1:
                    meta["caughtUp"] = True
                queue_more = schedule["onBacklog"] == "queue" and window > 0
                if run_id in stored:  # stored by the cut tick: started then
                    meta.update(runId=run_id, queued=stored[run_id].get("handoffAt") is None)
                    busy.add(install_id)
                    if meta["queued"]:
                        waiting.add(install_id)
                elif install_id not in ready:
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
                    meta.update(runId=run_id, queued=queued)
                    # Later fires of this batch find the install busy (and this run waiting).
                    busy.add(install_id)
                    if queued:
                        waiting.add(install_id)
                metas.append(meta)
                events.append(self.events.document(install_id, "scheduler_run", meta=meta, event_id=event_id))
                if meta["runId"] is None or run_id in stored:
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
        batch = Batch(self.store)
        ledger.enqueue_in(batch, runs)
        for event in events:
            batch.put("pipeline_events", event)
        if token is not None:  # last: the fire stays noted as claimed until all of it is stored
            for install_id in ids:
                batch.update("schedules", {"_id": install_id}, {"$pull": {"firing": {"token": token}}})
        await batch.commit()
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
            # The install's active runs, by the (installId, status) index; a filter with a
            # top-level `$or` would read every run on the embedded server.
            active = (
                await self.store["pipeline_runs"]
                .find(
                    {"installId": run["installId"], "status": {"$in": ["starting", "running", "queued"]}},
                    {"status": 1, "handoffAt": 1},
                )
                .to_list(None)
            )
            if not any(other["status"] != "queued" or other.get("handoffAt") for other in active):
                await self._start(run)

    async def _start(self, run: Document) -> None:
        now = utcnow()
        if not await ledger.release(self.store, run["_id"], now):
            return  # another scheduler handed it over
        await self.handover.now({**run, "handoffAt": now})
