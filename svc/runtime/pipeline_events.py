"""Pipeline events: what happened to an install's runs, for the operator console's feeds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from svc.core import Store, iso, new_id, newest_in_windows, utcnow
from svc.runtime import daily_step_counts

EventType = Literal[
    "gate_triggered",
    "gate_approved",
    "gate_rejected",
    "step_cancelled",
    "step_completed",
    "step_failed",
    "scheduler_run",
    "schedule_paused",
]
FEED_LIMIT = 100


class Events:
    """Emits and reads pipeline events."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def emit(
        self,
        install_id: str,
        event_type: EventType,
        *,
        step_key: str | None = None,
        gate_name: str | None = None,
        actor_id: str | None = None,
        actor_email: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> None:
        """Record one event."""
        await self.store["pipeline_events"].insert_one(
            self.document(
                install_id,
                event_type,
                step_key=step_key,
                gate_name=gate_name,
                actor_id=actor_id,
                actor_email=actor_email,
                meta=meta,
            )
        )

    @staticmethod
    def document(
        install_id: str,
        event_type: EventType,
        *,
        step_key: str | None = None,
        gate_name: str | None = None,
        actor_id: str | None = None,
        actor_email: str | None = None,
        meta: dict[str, Any] | None = None,
        event_id: str | None = None,
    ) -> dict[str, Any]:
        """The stored form of an event (also for batched writes; a writer that may send one twice,
        a run's settlement, names it by `event_id`)."""
        return {
            "_id": event_id or new_id(),
            "installId": install_id,
            "eventType": event_type,
            "stepKey": step_key,
            "gateName": gate_name,
            "actorId": actor_id,
            "actorEmail": actor_email,
            "meta": meta or {},
            "createdAt": utcnow(),
        }

    async def latest(self, install_id: str, since: datetime | None = None) -> list[dict[str, Any]]:
        """The last 100 events, newest first, read in windows (svc/core/windows.py) back to `since`
        (the install's creation), so the cost depends on the 100, not on the install's history."""
        docs = await newest_in_windows(
            self.store["pipeline_events"], {"installId": install_id}, FEED_LIMIT, floor=since
        )
        return [
            {
                "id": d["_id"],
                "eventType": d["eventType"],
                "stepKey": d.get("stepKey"),
                "gateName": d.get("gateName"),
                "actorId": d.get("actorId"),
                "actorEmail": d.get("actorEmail"),
                "meta": d.get("meta") or {},
                "createdAt": iso(d["createdAt"]),
            }
            for d in docs
        ]

    async def run_log(self, install_id: str, days: int, now: datetime | None = None) -> list[dict[str, Any]]:
        """Per UTC day, oldest first: step_completed (ok) and step_failed (error) counts, zeros included.

        Counted incrementally (svc/runtime/daily_step_counts.py): a request reads the events since
        the previous one, not the whole window."""
        today = (now or utcnow()).astimezone(UTC).date()
        first = today - timedelta(days=days - 1)
        start = datetime(first.year, first.month, first.day, tzinfo=UTC)
        counted = await daily_step_counts.per_day(self.store, install_id, start, now or utcnow())
        counts = {}
        for n in range(days):
            ok, error = counted.get(first + timedelta(days=n), (0, 0))
            counts[first + timedelta(days=n)] = {"ok": ok, "error": error}
        return [{"date": day.isoformat(), **value} for day, value in counts.items()]


async def agent_runs(
    store: Store, install_id: str, limit: int, since: datetime | None = None
) -> list[dict[str, Any]]:
    """The install's newest `limit` agent steps, newest first, read in windows back to `since`
    (svc/core/windows.py): the cost depends on `limit`, not on the install's history."""
    docs = await newest_in_windows(store["agent_runs"], {"installId": install_id}, limit, floor=since)
    return [
        {
            "id": d["_id"],
            "agentKey": d["agentKey"],
            "runId": d["runId"],
            "status": d["status"],
            "inputTokens": d["inputTokens"],
            "outputTokens": d["outputTokens"],
            "errorMessage": d.get("errorMessage"),
            "createdAt": iso(d["createdAt"]),
        }
        for d in docs
    ]
