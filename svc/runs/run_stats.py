"""Run counters, so analytics and billing cost grows with installs and days, not with runs.

Every new run record adds one to three counters in `run_stats` (one bulk write):

- `total`: all time, per template, install, platform and agent (GET /api/runs reads these), with
  the newest record's time, `lastRunAt` (the install's, in GET /api/installs/mine: `last_runs`);
- `day` and `hour`: per install and UTC day or hour (billing reads these);
- `latest`: per template, its newest runs (svc/runs/newest.py), so the run list of
  GET /api/runs is one bounded document whatever the number of runs or their age.

A billing period is cut into whole days, then whole hours at either end, then the two
partial hours at the very edges, which are read from the run records themselves. The
figures are therefore exact for any period, and a 30-day period reads about 30 day
counters, 46 hour counters and two hours of runs per install.

A reported run's counters are written after its record; if a process dies between the two
writes, `svc runs rebuild-stats` recomputes them from the records. A managed run's record and
counters are owed by its end and written exactly once (`count_once`, svc/runtime/settlement.py).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from pymongo import UpdateOne
from pymongo.errors import BulkWriteError

from svc.core import Batch, Document, Store, aware
from svc.runs import newest

COLLECTION = "run_stats"
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
COUNTERS = ("runs", "failed", "completed", "inputTokens", "outputTokens", "tokenRuns", "billedTokens")


def _floor(moment: datetime, unit: timedelta) -> datetime:
    moment = aware(moment).astimezone(UTC)
    if unit == DAY:
        return moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return moment.replace(minute=0, second=0, microsecond=0)


def _ceil(moment: datetime, unit: timedelta) -> datetime:
    floor = _floor(moment, unit)
    return floor if floor == moment else floor + unit


def increments_for(run: Document) -> dict[str, int]:
    """What one run record adds to each of its counters."""
    completed = run["status"] == "completed"
    tokens = int(run.get("inputTokens") or 0) + int(run.get("outputTokens") or 0)
    return {
        "runs": 1,
        "failed": 0 if completed else 1,
        "completed": 1 if completed else 0,
        "inputTokens": int(run.get("inputTokens") or 0),
        "outputTokens": int(run.get("outputTokens") or 0),
        "tokenRuns": 1 if run.get("inputTokens") is not None or run.get("outputTokens") is not None else 0,
        # Completed runs' tokens, and a failed run's marked billable (stopped by its token cap).
        "billedTokens": tokens if completed or run.get("billable") else 0,
    }


def keeps_last_run(fields: Document) -> bool:
    """Whether a counter (by its identifying fields) keeps its newest record's time, `lastRunAt`:
    the all-time one does."""
    return bool(fields["kind"] == "total")


def counters_of(run: Document) -> list[tuple[str, Document]]:
    """The (id, identifying fields) of the three counters a run adds to."""
    base = {"templateId": run["templateId"], "installId": run["installId"], "owner": run.get("owner")}
    total_id = f"total|{run['templateId']}|{run['installId']}|{run['platform']}|{run.get('agentKey')}"
    out = [
        (total_id, {**base, "kind": "total", "platform": run["platform"], "agentKey": run.get("agentKey")})
    ]
    for kind, unit in (("day", DAY), ("hour", HOUR)):
        start = _floor(run["createdAt"], unit)
        out.append(
            (
                f"{kind}|{run['templateId']}|{run['installId']}|{start.isoformat()}",
                {**base, "kind": kind, "start": start},
            )
        )
    return out


async def count(store: Store, run: Document) -> None:
    """Add a new run record to its counters, then to its template's newest runs."""
    await count_many(store, [run])


async def count_many(store: Store, runs: list[Document]) -> None:
    """Add new run records to their counters (one bulk write of upserts, the increments of
    one counter summed; a racing first insert is retried once), then to the newest runs."""
    increments: dict[str, dict[str, int]] = {}
    fields_of: dict[str, Document] = {}
    newest_at: dict[str, datetime] = {}  # the all-time counters' newest record
    for run in runs:
        inc = increments_for(run)
        for key, fields in counters_of(run):
            fields_of[key] = fields
            total = increments.setdefault(key, dict.fromkeys(inc, 0))
            for name, value in inc.items():
                total[name] += value
            if keeps_last_run(fields):
                newest_at[key] = max(newest_at.get(key, run["createdAt"]), run["createdAt"])
    operations = [
        UpdateOne(
            {"_id": key},
            {
                "$inc": inc,
                "$setOnInsert": fields_of[key],
                **({"$max": {"lastRunAt": newest_at[key]}} if key in newest_at else {}),
            },
            upsert=True,
        )
        for key, inc in increments.items()
    ]
    try:
        await store[COLLECTION].bulk_write(operations, ordered=False)
    except BulkWriteError as exc:
        # Only the upserts that lost a race to create their counter are sent again.
        failed = [operations[error["index"]] for error in exc.details.get("writeErrors", [])]
        if failed:
            await store[COLLECTION].bulk_write(failed, ordered=False)
    by_template: dict[str, list[Document]] = {}
    for run in runs:
        by_template.setdefault(run["templateId"], []).append(run)
    await asyncio.gather(*(newest.keep_all(store, t, group) for t, group in by_template.items()))


# How many run ids a counter remembers having applied (`count_once`): a batch cut short is sent
# again by the same install's actor (or, once it is gone, the sweeper) before that install's later
# runs can push these ids out, so the window only needs to cover one batch.
APPLIED_WINDOW = 200


def count_once(batch: Batch, run: Document, tool_calls: tuple[int, int] = (0, 0)) -> None:
    """Add a managed run to its counters as operations of `batch`, exactly once per counter
    however often the batch is sent: each counter is created if missing, then incremented only
    if it has not applied this run's id yet (its `applied` list); then its template's newest runs.
    `tool_calls`: (all, failed) outbound calls the run made, for the install's tool counters."""
    inc = increments_for(run)
    for key, fields in counters_of(run):
        _once(batch, key, fields, inc, run["runId"], run["createdAt"] if keeps_last_run(fields) else None)
    calls, failed = tool_calls
    if calls:
        tools = {"kind": "tools", "installId": run["installId"]}
        _once(
            batch,
            f"tools|{run['installId']}",
            tools,
            {"toolCalls": calls, "failedToolCalls": failed},
            run["runId"],
        )
    newest.push_once(batch, run)


def _once(
    batch: Batch, key: str, fields: Document, inc: dict[str, int], run_id: str, at: datetime | None = None
) -> None:
    """One counter's guarded increment; `at`: the run's time, kept as `lastRunAt` if newer."""
    change: Document = {"$inc": inc, "$push": {"applied": {"$each": [run_id], "$slice": -APPLIED_WINDOW}}}
    if at is not None:
        change["$max"] = {"lastRunAt": at}
    batch.once(COLLECTION, {"_id": key}, {"applied": {"$ne": run_id}}, change, fields)


async def count_tool_call(store: Store, install_id: str, status_code: int | None) -> None:
    """Add an agent's outbound call to its install's all-time tool-call counter.

    A call failed when it got no HTTP response (blocked, or a transport failure) or a
    status of 400 or more.
    """
    failed = status_code is None or status_code >= 400
    await store[COLLECTION].update_one(
        {"_id": f"tools|{install_id}"},
        {
            "$inc": {"toolCalls": 1, "failedToolCalls": 1 if failed else 0},
            "$setOnInsert": {"kind": "tools", "installId": install_id},
        },
        upsert=True,
    )


async def rebuild(store: Store, match: Document | None = None, batch: int = 1000) -> int:
    """Recompute the counters of the runs matching `match` from the records; counters written.

    `match` may name templateId, installId or owner (fields both collections have); the
    counters it selects are replaced. Runs recorded while it works are not counted: stop
    the writers (or rebuild again) for an exact result.
    """
    match = match or {}
    totals: dict[str, dict[str, Any]] = {}
    async for run in store["runs"].find(match):
        inc = increments_for(run)
        for key, fields in counters_of(run):
            row = totals.setdefault(key, {**fields, **dict.fromkeys(COUNTERS, 0)})
            for name, value in inc.items():
                row[name] += value
            if keeps_last_run(fields):
                row["lastRunAt"] = max(row.get("lastRunAt") or run["createdAt"], run["createdAt"])
    # Only counters derived from run records: tool-call counters come from the (expiring) log.
    await store[COLLECTION].delete_many({**match, "kind": {"$in": ["total", "day", "hour"]}})
    operations = [UpdateOne({"_id": key}, {"$set": row}, upsert=True) for key, row in totals.items()]
    for start in range(0, len(operations), batch):
        await store[COLLECTION].bulk_write(operations[start : start + batch], ordered=False)
    for template_id in {row["templateId"] for row in totals.values()}:
        await newest.rebuild(store, template_id)
    return len(operations)


# ---- reading ----------------------------------------------------------------------------


async def last_runs(store: Store, install_ids: list[str]) -> dict[str, datetime]:
    """When each install's newest run record was made (installs that never ran are left out):
    the newest `lastRunAt` of its all-time counters (one per platform and agent), one read."""
    counters = store[COLLECTION].find(
        {"kind": "total", "installId": {"$in": install_ids}}, {"installId": 1, "lastRunAt": 1}
    )
    newest: dict[str, datetime] = {}
    for doc in await counters.to_list(None):
        at = doc.get("lastRunAt")
        if at is not None:
            at = aware(at)
            newest[doc["installId"]] = max(newest.get(doc["installId"], at), at)
    return newest


def segments(
    start: datetime, end: datetime, *, open_end: bool = False
) -> list[tuple[str, datetime, datetime]]:
    """[start, end) as ("day" | "hour" | "raw", low, high) pieces: whole days, whole hours, the rest.

    `open_end`: `end` is the present, so no run is recorded after it yet and its partial
    hour is read from that hour's counter instead of from the run records (the current
    hour's records are the ones that grow with the load: 2,000 runs an hour is 2,000 to
    read on every request). A run recorded while the request is answered may be counted.
    """
    if start >= end:
        return []
    first_hour, last_hour = _ceil(start, HOUR), _floor(end, HOUR)
    if open_end and first_hour <= last_hour < end:
        return [*segments(start, last_hour), ("hour", last_hour, last_hour + HOUR)]
    if first_hour >= last_hour:
        return [("raw", start, end)]
    out = [("raw", low, high) for low, high in ((start, first_hour), (last_hour, end)) if low < high]
    first_day, last_day = _ceil(first_hour, DAY), _floor(last_hour, DAY)
    if first_day >= last_day:
        return [*out, ("hour", first_hour, last_hour)]
    out += [
        ("hour", low, high) for low, high in ((first_hour, first_day), (last_day, last_hour)) if low < high
    ]
    return [*out, ("day", first_day, last_day)]


@dataclass(frozen=True)
class InstallUsage:
    """One install's runs in a period."""

    install_id: str
    runs: int
    completed: int
    tokens: int
    billed_tokens: int


def _raw_pipeline(match: Document) -> list[Document]:
    tokens = {"$add": [{"$ifNull": ["$inputTokens", 0]}, {"$ifNull": ["$outputTokens", 0]}]}
    completed = {"$eq": ["$status", "completed"]}
    billed = {"$or": [completed, {"$eq": ["$billable", True]}]}  # as `increments_for`
    return [
        {"$match": match},
        {
            "$group": {
                "_id": "$installId",
                "runs": {"$sum": 1},
                "completed": {"$sum": {"$cond": [completed, 1, 0]}},
                "tokens": {"$sum": tokens},
                "billedTokens": {"$sum": {"$cond": [billed, tokens, 0]}},
            }
        },
    ]


def _counter_pipeline(match: Document) -> list[Document]:
    return [
        {"$match": match},
        {
            "$group": {
                "_id": "$installId",
                "runs": {"$sum": "$runs"},
                "completed": {"$sum": "$completed"},
                "tokens": {"$sum": {"$add": ["$inputTokens", "$outputTokens"]}},
                "billedTokens": {"$sum": "$billedTokens"},
            }
        },
    ]


async def usage_by_install(
    store: Store, scope: Document, start: datetime, end: datetime, *, open_end: bool = False
) -> list[InstallUsage]:
    """Runs, completed runs and tokens per install in [start, end), for runs matching `scope`
    (templateId and/or installId). `open_end`: `end` is now (see `segments`); never for
    charging, where a period's end must be exact."""
    totals: dict[str, dict[str, int]] = {}
    for kind, low, high in segments(start, end, open_end=open_end):
        if kind == "raw":
            collection, pipeline = "runs", _raw_pipeline({**scope, "createdAt": {"$gte": low, "$lt": high}})
        else:
            collection = COLLECTION
            pipeline = _counter_pipeline({"kind": kind, **scope, "start": {"$gte": low, "$lt": high}})
        async for row in await store[collection].aggregate(pipeline):
            entry = totals.setdefault(row["_id"], {"runs": 0, "completed": 0, "tokens": 0, "billedTokens": 0})
            for name in entry:
                entry[name] += int(row[name])
    return [
        InstallUsage(install_id, t["runs"], t["completed"], t["tokens"], t["billedTokens"])
        for install_id, t in sorted(totals.items())
    ]


MAX_AGENT_COUNTERS = 500


async def install_days(
    store: Store, install_id: str, days: int, now: datetime
) -> list[tuple[date, Document]]:
    """The install's day counters for the last `days` UTC days up to `now`'s, oldest first (an
    empty document for a day without runs): one read of at most `days` counters."""
    today = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    first = today - timedelta(days=days - 1)
    found = {
        aware(doc["start"]).date(): doc
        for doc in await store[COLLECTION]
        .find({"kind": "day", "installId": install_id, "start": {"$gte": first}})
        .to_list(days + 1)
    }
    return [(day, found.get(day, {})) for day in ((first + timedelta(days=n)).date() for n in range(days))]


async def install_agent_tokens(store: Store, install_id: str) -> dict[str, int]:
    """The install's tokens (in and out) per agent, all time, from its total counters ("—" for
    runs reported without an agent)."""
    tokens: dict[str, int] = defaultdict(int)
    for doc in (
        await store[COLLECTION].find({"kind": "total", "installId": install_id}).to_list(MAX_AGENT_COUNTERS)
    ):
        tokens[doc.get("agentKey") or "—"] += int(doc.get("inputTokens", 0)) + int(doc.get("outputTokens", 0))
    return dict(tokens)
