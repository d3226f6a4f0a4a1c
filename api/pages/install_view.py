"""What every page of an install shows: its newest runs, and the heading (version and badge).

The badge tells a deployer at a glance whether the install can run and how its last run
went: "ready" on a fresh install, "running" while a run goes on, "last run failed" in red
after a failure; never the green "completed" the install record says once it is deployed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from aiohttp import web
from pymongo import DESCENDING

from api.context import services
from svc.core import Document, aware, iso, utcnow
from svc.runtime import ledger

RUNS_SHOWN = 50
# What a runs table reads of a run: not its pipeline state, journal or events (svc/runtime/ledger.py).
LIST_PROJECTION: Document = {"state": 0, **ledger.HEAVY}
FIRST_WINDOW = timedelta(hours=1)
WIDEST_WINDOW = timedelta(days=365)
# What the badge of a ready install says, after its newest run's status.
LAST_RUN_LABELS = {
    "queued": "run queued",
    "running": "running",
    "paused": "paused at a gate",
    "completed": "last run completed",
    "failed": "last run failed",
    "cancelled": "last run cancelled",
}


def run_row(doc: Document) -> dict[str, Any]:
    """A pipeline run as the runs table shows it."""
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


async def latest_runs(
    request: web.Request, install: Document, limit: int = RUNS_SHOWN
) -> list[dict[str, Any]]:
    """The install's newest runs, read through widening time windows.

    On the embedded store a query costs what its filter matches, whatever the limit,
    so "newest 50 of all runs" would read every run of the install. The first window
    is an hour (for 50 runs; shorter in proportion for fewer); when it holds fewer than
    `limit` runs, the next one is sized from the rate it saw (with a margin), at least
    four times wider, and the last has no bound.
    A window that reaches back to the install's creation holds every run there is, so
    a young install is served by one read, a busy one by its last hour, a quiet one by
    one wider read.
    """
    runs = services(request).store[ledger.RUNS]
    now = utcnow()
    created = install.get("createdAt")
    # Sized to the runs wanted: the badge's one newest run starts from a window of about a minute.
    window: timedelta | None = FIRST_WINDOW * min(limit, RUNS_SHOWN) / RUNS_SHOWN
    docs: list[Document] = []
    while True:
        query: Document = {"installId": install["_id"]}
        if window is not None:
            query["createdAt"] = {"$gte": now - window}
        docs = (
            await runs.find(query, LIST_PROJECTION)
            .sort([("createdAt", DESCENDING), ("_id", DESCENDING)])
            .limit(limit)
            .to_list(limit)
        )
        if len(docs) >= limit or window is None:
            break
        if created is not None and now - window <= aware(created) - timedelta(minutes=1):
            break  # the window covers the install's whole life (a minute of clock slack)
        wider = max(window * 4, window * (limit / max(len(docs), 1)) * 1.5)
        window = wider if wider < WIDEST_WINDOW else None
    return [run_row(doc) for doc in docs]


@dataclass(frozen=True)
class Badge:
    """The install's badge: its state, or once it is ready, how its newest run is going or went."""

    label: str
    tone: str  # the status whose colour it wears (app.css `.status-<tone>`)
    title: str


def badge(install: Document, newest: dict[str, Any] | None) -> Badge:
    """ "awaiting approval" or "pending" before it can run; "ready" until it has run; then its
    newest run ("running", "last run failed", ...)."""
    state = install["status"]
    if state == "pending":
        if install.get("approval") == "pending":
            return Badge("awaiting approval", "pending", "An organisation admin must approve this install")
        return Badge("pending", "pending", "Not ready to run yet")
    if state != "completed":
        return Badge(state, state, f"This install is {state}")
    if newest is None:
        return Badge("ready", "ready", "Installed; no runs yet")
    status = newest["status"]
    title = f"Newest run started {newest['createdAt']}"
    if newest.get("errorMessage"):
        title += f": {newest['errorMessage']}"
    return Badge(LAST_RUN_LABELS.get(status, status), status, title)


@dataclass(frozen=True)
class Heading:
    """Beside an install's name on each of its pages: the installed version and the badge."""

    version: str | None  # the template version's semver
    badge: Badge


async def heading(
    request: web.Request, install: Document, runs: list[dict[str, Any]] | None = None
) -> Heading:
    """The install's heading; `runs` when the page has read them already (newest first)."""
    if runs is None:
        runs = await latest_runs(request, install, limit=1)
    key = (install["templateId"], install["templateVersion"])
    semvers = await services(request).templates.semvers([key])
    return Heading(semvers.get(key), badge(install, runs[0] if runs else None))
