"""An install's managed runs as lists: its newest runs, the runs paused for a decision, and how
many runs of the deployment wait to start.

The dashboard's runs table, its badge and its gate panel read these (through `RunDetail`), and
`GET /metrics` counts the queued runs; none of them reads `pipeline_runs` itself.

The newest runs are read in time windows (svc/core/windows.py) back to the install's creation,
like every newest-first feed of the API (events, agent runs, the security log): on the embedded
store a query costs what its filter matches, whatever its limit, so "newest 50 of all runs"
would read every run of the install, while a window reads only its own runs.
"""

from __future__ import annotations

from typing import Any

from svc.core import Document, Store, iso, newest_in_windows, window_floor
from svc.runtime.ledger import HEAVY, RUNS

NEWEST_MAX = 50
PAUSED_SHOWN = 20
# What a runs table reads of a run: not its pipeline state, journal or events (ledger.HEAVY).
LIST_PROJECTION: Document = {"state": 0, **HEAVY}
# A paused run as a gate panel shows it: its row, and the tool call it stopped at (if any).
PAUSED_PROJECTION: Document = {
    name: 1
    for name in (
        "status",
        "source",
        "agentKey",
        "pausedAtGate",
        "inputTokens",
        "outputTokens",
        "errorMessage",
        "createdAt",
        "endedAt",
        "state.call",
    )
}


def run_row(doc: Document) -> dict[str, Any]:
    """A managed run as a runs list shows it."""
    return {
        "id": doc["_id"],
        "status": doc["status"],
        "source": doc.get("source", "run"),
        "agentKey": doc.get("agentKey"),
        "pausedAtGate": doc.get("pausedAtGate") if doc["status"] == "paused" else None,
        "inputTokens": doc.get("inputTokens"),
        "outputTokens": doc.get("outputTokens"),
        "errorMessage": doc.get("errorMessage"),
        "createdAt": iso(doc.get("createdAt")),
        "endedAt": iso(doc.get("endedAt")),
    }


async def newest_runs(store: Store, install: Document, limit: int) -> list[dict[str, Any]]:
    """The install's newest `limit` runs (at most NEWEST_MAX), newest first (time, then id)."""
    count = min(limit, NEWEST_MAX)
    docs = await newest_in_windows(
        store[RUNS],
        {"installId": install["_id"]},
        count,
        floor=window_floor(install),
        projection=LIST_PROJECTION,
        # The span remembered per count: the badge's newest run must not start from the span
        # the table's 50 took (nor the table from the badge's).
        key=f"{install['_id']}|{count}",
    )
    return [run_row(doc) for doc in docs]


async def paused_runs(store: Store, install_id: str, limit: int = PAUSED_SHOWN) -> list[dict[str, Any]]:
    """The install's paused runs, longest paused first, each with the tool call a person must
    settle (None at a pipeline's own gate). Any team's run may stop at a tool call (an MCP call
    awaiting approval, a request whose outcome a crash left unknown), gates or not. The
    (installId, status) index covers the filter."""
    docs = (
        await store[RUNS]
        .find({"installId": install_id, "status": "paused"}, PAUSED_PROJECTION)
        .sort([("pausedAt", 1), ("_id", 1)])
        .to_list(limit)
    )
    return [{**run_row(doc), "call": (doc.get("state") or {}).get("call")} for doc in docs]


async def queued_runs(store: Store) -> int:
    """How many runs of the deployment wait to start (GET /metrics, `svc_runs_queued`; the
    (status, createdAt) index)."""
    return await store[RUNS].count_documents({"status": "queued"})
