"""Hourly counters of runs, so analytics and billing cost grows with hours, not with runs.

Every new run record adds one to its bucket in `run_stats`: one document per install,
agent and UTC hour, holding run, failure and token totals. `GET /api/runs` sums the
buckets of a template; `GET /api/billing` and the charges sum the whole hours of their
period from the buckets and read only the two partial edge hours from the run records,
so their figures are exact. The counters are written after the run record; if a process
dies between the two writes, `svc runs rebuild-stats` recomputes them from the records.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pymongo import UpdateOne
from pymongo.errors import DuplicateKeyError

from svc.clock import aware
from svc.store import Document, Store

HOUR = timedelta(hours=1)
COLLECTION = "run_stats"


def hour_of(moment: datetime) -> datetime:
    """The start of the UTC hour holding `moment`."""
    return aware(moment).astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _tokens(doc: Document) -> int:
    return int(doc.get("inputTokens") or 0) + int(doc.get("outputTokens") or 0)


def increments(run: Document) -> Document:
    """What one run record adds to its bucket."""
    completed = run["status"] == "completed"
    return {
        "runs": 1,
        "failed": 0 if completed else 1,
        "completed": 1 if completed else 0,
        "inputTokens": int(run.get("inputTokens") or 0),
        "outputTokens": int(run.get("outputTokens") or 0),
        "tokenRuns": 1 if run.get("inputTokens") is not None or run.get("outputTokens") is not None else 0,
        "billedTokens": _tokens(run) if completed else 0,
    }


def bucket(run: Document) -> tuple[str, Document]:
    """The bucket id of a run and the fields that identify it."""
    hour = hour_of(run["createdAt"])
    key = f"{run['templateId']}|{run['installId']}|{run.get('agentKey')}|{hour.isoformat()}"
    return key, {
        "templateId": run["templateId"],
        "installId": run["installId"],
        "platform": run["platform"],
        "agentKey": run.get("agentKey"),
        "owner": run.get("owner"),
        "hour": hour,
    }


async def count(store: Store, run: Document) -> None:
    """Add a new run record to its bucket (an upsert; a racing first insert is retried)."""
    key, fields = bucket(run)
    update = {"$inc": increments(run), "$setOnInsert": fields}
    try:
        await store[COLLECTION].update_one({"_id": key}, update, upsert=True)
    except DuplicateKeyError:
        await store[COLLECTION].update_one({"_id": key}, update, upsert=True)


async def rebuild(store: Store, match: Document | None = None, batch: int = 1000) -> int:
    """Recompute the buckets of the runs matching `match` from the run records; buckets written.

    `match` may name templateId, installId, platform, agentKey or owner (fields both
    collections have); the buckets it selects are replaced.
    """
    match = match or {}
    totals: dict[str, Document] = {}
    fields: dict[str, Document] = {}
    async for run in store["runs"].find(match):
        key, identity = bucket(run)
        fields[key] = identity
        row = totals.setdefault(key, dict.fromkeys(increments(run), 0))
        for name, value in increments(run).items():
            row[name] += value
    await store[COLLECTION].delete_many(match)
    operations = [
        UpdateOne({"_id": key}, {"$set": {**fields[key], **row}}, upsert=True) for key, row in totals.items()
    ]
    for start in range(0, len(operations), batch):
        await store[COLLECTION].bulk_write(operations[start : start + batch], ordered=False)
    return len(operations)


@dataclass(frozen=True)
class InstallUsage:
    """One install's runs in a period."""

    install_id: str
    runs: int
    completed: int
    tokens: int
    billed_tokens: int


def _raw_usage_pipeline(match: Document) -> list[Document]:
    tokens = {"$add": [{"$ifNull": ["$inputTokens", 0]}, {"$ifNull": ["$outputTokens", 0]}]}
    completed = {"$eq": ["$status", "completed"]}
    return [
        {"$match": match},
        {
            "$group": {
                "_id": "$installId",
                "runs": {"$sum": 1},
                "completed": {"$sum": {"$cond": [completed, 1, 0]}},
                "tokens": {"$sum": tokens},
                "billedTokens": {"$sum": {"$cond": [completed, tokens, 0]}},
            }
        },
    ]


def _stats_usage_pipeline(match: Document) -> list[Document]:
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
    store: Store, scope: Document, start: datetime, end: datetime
) -> list[InstallUsage]:
    """Runs, completed runs and tokens per install in [start, end), for runs matching `scope`.

    Whole hours come from the buckets; the partial hours at either edge from the records.
    """
    first_whole = hour_of(start) if hour_of(start) == start else hour_of(start) + HOUR
    last_whole = hour_of(end)
    queries: list[tuple[str, list[Document]]] = []
    if first_whole < last_whole:
        queries.append(
            (COLLECTION, _stats_usage_pipeline({**scope, "hour": {"$gte": first_whole, "$lt": last_whole}}))
        )
        edges = [(start, first_whole), (last_whole, end)]
    else:
        edges = [(start, end)]
    for low, high in edges:
        if low < high:
            queries.append(("runs", _raw_usage_pipeline({**scope, "createdAt": {"$gte": low, "$lt": high}})))
    totals: dict[str, dict[str, int]] = {}
    for collection, pipeline in queries:
        async for row in await store[collection].aggregate(pipeline):
            entry = totals.setdefault(row["_id"], {"runs": 0, "completed": 0, "tokens": 0, "billedTokens": 0})
            for name in entry:
                entry[name] += int(row[name])
    return [
        InstallUsage(install_id, t["runs"], t["completed"], t["tokens"], t["billedTokens"])
        for install_id, t in sorted(totals.items())
    ]
