"""What other packages read of runs: the runs package owns `runs`, `run_stats` and
`runs_newest`; everyone else asks these functions (tests/test_architecture.py, ownership)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from svc.core import Document, Store
from svc.runs import run_stats


async def find_record(store: Store, install_id: str, run_id: str) -> Document | None:
    """One run record of an install by its run id, or None."""
    return await store["runs"].find_one({"installId": install_id, "runId": run_id})


async def daily_by_install(
    store: Store, owner: Document, start: datetime, end: datetime, open_end: bool
) -> list[Document]:
    """Runs and successes per UTC day, template and install, of the installs `owner` matches
    (`{"owner.kind": ..., "owner.id": ...}`), from `start` to `end`: whole days and hours from
    the run counters, the edge hours from the records (a window ending now, `open_end`, reads
    its current hour from the hour counters). Each group is `{_id: {day, templateId,
    installId}, total, success}`; a day may come in several groups."""
    groups: list[Document] = []
    for kind, low, high in run_stats.segments(start, end, open_end=open_end):
        if kind == "raw":
            match = {**owner, "createdAt": {"$gte": low, "$lt": high}}
            pipeline = _daily(match, "$createdAt", 1, {"$cond": [{"$eq": ["$status", "completed"]}, 1, 0]})
            groups += await (await store["runs"].aggregate(pipeline)).to_list(None)
        else:
            match = {"kind": kind, **owner, "start": {"$gte": low, "$lt": high}}
            pipeline = _daily(match, "$start", "$runs", "$completed")
            groups += await (await store[run_stats.COLLECTION].aggregate(pipeline)).to_list(None)
    return groups


def _daily(match: Document, time: str, runs: Any, successes: Any) -> list[Document]:
    """Runs and successes per UTC day, template and install."""
    return [
        {"$match": match},
        {
            "$group": {
                "_id": {
                    "day": {"$dateToString": {"format": "%Y-%m-%d", "date": time}},
                    "templateId": "$templateId",
                    "installId": "$installId",
                },
                "total": {"$sum": runs},
                "success": {"$sum": successes},
            }
        },
    ]
