"""What a recorded run adds to the operational counters (svc/core/counters.py, GET /metrics)."""

from __future__ import annotations

from svc.core import Document, Store, aware, counters


async def recorded(store: Store, run: Document) -> None:
    """Count a new run record by platform and status; a managed run also gives its duration.

    Managed (`svc`) runs have a `pipeline_runs` record whose `startedAt` is when the install's
    actor began the run; other platforms report finished runs with no start time.
    """
    await counters.inc(store, "runs", {"platform": run["platform"], "status": run["status"]})
    if run["platform"] != "svc":
        return
    started = await store["pipeline_runs"].find_one({"_id": run["runId"]}, {"startedAt": 1})
    if started is None or started.get("startedAt") is None:
        return
    seconds = (aware(run["createdAt"]) - aware(started["startedAt"])).total_seconds()
    if seconds >= 0:
        await counters.observe(
            store, "run_duration_seconds", {"platform": "svc"}, [seconds], counters.DURATION_BUCKETS
        )
