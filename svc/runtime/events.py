"""Pipeline events: what happened to an install's runs, for the operator console's feeds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pymongo import DESCENDING

from svc.core import Store, iso, tokens, utcnow

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
    ) -> dict[str, Any]:
        """The stored form of an event (also for batched writes)."""
        return {
            "_id": tokens.new_id(),
            "installId": install_id,
            "eventType": event_type,
            "stepKey": step_key,
            "gateName": gate_name,
            "actorId": actor_id,
            "actorEmail": actor_email,
            "meta": meta or {},
            "createdAt": utcnow(),
        }

    async def latest(self, install_id: str) -> list[dict[str, Any]]:
        """The last 100 events, newest first."""
        docs = (
            await self.store["pipeline_events"]
            .find({"installId": install_id})
            .sort([("createdAt", DESCENDING), ("_id", DESCENDING)])
            .to_list(FEED_LIMIT)
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
        """Per UTC day, oldest first: step_completed (ok) and step_failed (error) counts, zeros included."""
        today = (now or utcnow()).astimezone(UTC).date()
        first = today - timedelta(days=days - 1)
        start = datetime(first.year, first.month, first.day, tzinfo=UTC)
        counts = {first + timedelta(days=n): {"ok": 0, "error": 0} for n in range(days)}
        cursor = self.store["pipeline_events"].find(
            {
                "installId": install_id,
                "createdAt": {"$gte": start},
                "eventType": {"$in": ["step_completed", "step_failed"]},
            },
            {"eventType": 1, "createdAt": 1},
        )
        async for doc in cursor:
            day = doc["createdAt"].astimezone(UTC).date()
            if day in counts:
                counts[day]["ok" if doc["eventType"] == "step_completed" else "error"] += 1
        return [{"date": day.isoformat(), **value} for day, value in counts.items()]


async def agent_runs(store: Store, install_id: str, limit: int) -> list[dict[str, Any]]:
    """The install's agent steps, newest first."""
    docs = (
        await store["agent_runs"]
        .find({"installId": install_id})
        .sort([("createdAt", DESCENDING), ("_id", DESCENDING)])
        .to_list(limit)
    )
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
