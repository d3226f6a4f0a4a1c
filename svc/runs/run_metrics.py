"""What recorded runs add to the operational counters (svc/core/metric_counters.py, GET /metrics)."""

from __future__ import annotations

from collections import Counter

from svc.core import (
    DURATION_BUCKETS,
    Document,
    MetricChange,
    Store,
    aware,
    counter_increment,
    histogram_observation,
    write_metrics,
)


async def recorded(store: Store, run: Document) -> None:
    """Count a new run record (see `recorded_many`)."""
    await recorded_many(store, [run])


async def recorded_many(store: Store, runs: list[Document]) -> None:
    """Count new run records by platform and status; managed runs also give their durations.

    One round trip for any number of runs: the counter of each (platform, status) and the
    duration histogram in one bulk write.
    """
    await write_metrics(store, changes(runs))


def changes(runs: list[Document]) -> list[MetricChange | None]:
    """The counter changes of new run records. A managed (`svc`) run's record carries `startedAt`,
    when the install's actor began it (a run failed before it started has none); other
    platforms report finished runs with no start time."""
    by_label = Counter((run["platform"], run["status"]) for run in runs)
    seconds = [
        (aware(run["createdAt"]) - aware(run["startedAt"])).total_seconds()
        for run in runs
        if run["platform"] == "svc" and run.get("startedAt") is not None
    ]
    return [
        *(
            counter_increment("runs", {"platform": platform, "status": status}, seen)
            for (platform, status), seen in sorted(by_label.items())
        ),
        histogram_observation(
            "run_duration_seconds",
            {"platform": "svc"},
            [s for s in seconds if s >= 0],
            DURATION_BUCKETS,
        ),
    ]
