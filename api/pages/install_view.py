"""What every page of an install shows: the heading (version and badge).

The badge tells a deployer at a glance whether the install can run and how its last run
went: "ready" on a fresh install, "running" while a run goes on, "last run failed" in red
after a failure; never the green "completed" the install record says once it is deployed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from api.context import services
from svc.core import Document

# What the badge of a ready install says, after its newest run's status.
LAST_RUN_LABELS = {
    "queued": "run queued",
    "running": "running",
    "paused": "paused at a gate",
    "completed": "last run completed",
    "failed": "last run failed",
    "cancelled": "last run cancelled",
}


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
    """The install's heading; `runs` when the page has read them already (newest first), else
    the newest run from `RunDetail.newest`, the runs table's own read."""
    if runs is None:
        runs = await services(request).run_detail.newest(install, limit=1)
    key = (install["templateId"], install["templateVersion"])
    semvers = await services(request).templates.semvers([key])
    return Heading(semvers.get(key), badge(install, runs[0] if runs else None))
