"""What recorded runs add to the operational counters (svc/core/counters.py, GET /metrics)."""

from __future__ import annotations

from collections import Counter

from svc.core import Document, Store, aware, counters


async def recorded(store: Store, run: Document) -> None:
    """Count a new run record (see `recorded_many`)."""
    await recorded_many(store, [run])


async def recorded_many(store: Store, runs: list[Document]) -> None:
    """Count new run records by platform and status; managed runs also give their durations.

    One counter write per (platform, status) and one start-time look-up for all the
    managed runs, whatever the number of runs. Managed (`svc`) runs have a
    `pipeline_runs` record whose `startedAt` is when the install's actor began the run;
    other platforms report finished runs with no start time.
    """
    by_label = Counter((run["platform"], run["status"]) for run in runs)
    for (platform, status), seen in sorted(by_label.items()):
        await counters.inc(store, "runs", {"platform": platform, "status": status}, seen)
    managed = [run for run in runs if run["platform"] == "svc"]
    if not managed:
        return
    started = {
        doc["_id"]: doc.get("startedAt")
        for doc in await store["pipeline_runs"]
        .find({"_id": {"$in": [run["runId"] for run in managed]}}, {"startedAt": 1})
        .to_list(None)
    }
    seconds = [
        (aware(run["createdAt"]) - aware(started[run["runId"]])).total_seconds()
        for run in managed
        if started.get(run["runId"]) is not None
    ]
    durations = [s for s in seconds if s >= 0]
    if durations:
        await counters.observe(
            store, "run_duration_seconds", {"platform": "svc"}, durations, counters.DURATION_BUCKETS
        )
