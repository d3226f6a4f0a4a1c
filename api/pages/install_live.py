"""The runs tab's data: the install's newest runs and its gate panel, as one snapshot, and the
live stream that sends them again whenever they change (docs/dashboard.md, "Live runs").

What an open tab costs is bounded, whatever the number of tabs:

- a snapshot is read by the same service calls as the JSON API (`RunDetail.newest`,
  `RunDetail.paused`, `Outreach.drafts_of`, `Outreach.queue_of`), concurrently, in one slot
  of the heavy-request gate (api/heavy.py), like the API's heavy list routes;
- one snapshot per install serves every tab watching it for `SNAPSHOT_TTL_S`: each install
  is read at most once a second in this process, and concurrent tabs share one read;
- a tab looks for a change every `LIVE_POLL_S`, and checks that its viewer still reaches the
  install (`Installs.owned`) every `RECHECK_S`: the snapshot's reads take the install, not the
  viewer, so tabs of different people share them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp_jinja2
from aiohttp import web

from api.context import services
from api.heavy import HEAVY_GATE, Busy
from api.pages.base import PageTable, Viewer
from api.pages.install_view import badge
from api.sse import relay
from svc.core import Document, TTLCache

routes = PageTable()
LIVE_POLL_S = 1.0
SNAPSHOT_TTL_S = 1.0
RECHECK_S = 10.0
MAX_WATCHED = 1_000  # installs whose snapshot is kept (the oldest go first)


@dataclass(frozen=True)
class Snapshot:
    """What the runs tab shows of an install: its newest runs and its gate panel."""

    runs: list[dict[str, Any]]
    gates: dict[str, Any]


async def read_snapshot(request: web.Request, install: Document) -> Snapshot:
    """The install's newest runs and what waits for a decision: paused runs (any team's run may
    stop at a tool call), and for a pipeline with gates its drafts (with their recipients) and
    the targets waiting for review."""
    svc = services(request)
    install_id = install["_id"]
    pipeline = bool(install["definition"].get("gates"))
    reads: list[Awaitable[Any]] = [svc.run_detail.newest(install), svc.run_detail.paused(install_id)]
    if pipeline:
        reads += [
            svc.outreach.drafts_of(install_id, recipients=True),
            svc.outreach.queue_of(install_id, "target-review"),
        ]
    runs, paused, *pipeline_reads = await asyncio.gather(*reads)
    drafts, targets = pipeline_reads or ([], {"records": [], "total": 0})
    gates = {
        "hasGates": pipeline or bool(paused),
        "pipeline": pipeline,
        "paused": paused,
        "drafts": drafts,
        "targets": targets,
    }
    return Snapshot(runs, gates)


class LiveSnapshots:
    """One snapshot per install, kept for `SNAPSHOT_TTL_S` and shared by every tab; a read in
    flight is shared too, so tabs that ask at once cost one read."""

    def __init__(self, ttl_s: float = SNAPSHOT_TTL_S, max_entries: int = MAX_WATCHED) -> None:
        self.cache: TTLCache[str, Snapshot] = TTLCache(ttl_s, max_entries)
        self.reading: dict[str, asyncio.Future[Snapshot]] = {}

    async def get(
        self, install_id: str, read: Callable[[], Awaitable[Snapshot]], *, fresh: bool = False
    ) -> Snapshot:
        """The install's snapshot: the kept one, else the read in flight, else a new read (kept
        for the others). `fresh`: a new read whatever is kept or in flight (a read that began
        before what the person just did would not show it); the tabs then share that one."""
        pending = None if fresh else self.reading.get(install_id)
        if not fresh:
            kept = self.cache.get(install_id)
            if kept is not None:
                return kept
        if pending is None:
            pending = asyncio.ensure_future(read())
            self.reading[install_id] = pending
            pending.add_done_callback(lambda done: self._settle(install_id, done))
        # Shielded: a tab that leaves does not cancel the read the other tabs wait for.
        return await asyncio.shield(pending)

    def _settle(self, install_id: str, done: asyncio.Future[Snapshot]) -> None:
        """Keep a finished read's snapshot, unless a newer read replaced it meanwhile."""
        newest = self.reading.get(install_id) is done
        if newest:
            del self.reading[install_id]
        if not done.cancelled() and done.exception() is None and newest:
            self.cache.put(install_id, done.result())


LIVE_SNAPSHOTS = web.AppKey("live_snapshots", LiveSnapshots)


async def snapshot(request: web.Request, install: Document, *, fresh: bool = False) -> Snapshot:
    """The install's snapshot, read (when it must be) in a slot of the heavy-request gate; `Busy`
    (503) when no slot frees in time. `fresh` for a page load: what the person just did shows."""
    gate = request.app[HEAVY_GATE]
    return await request.app[LIVE_SNAPSHOTS].get(
        install["_id"], lambda: gate.read(lambda: read_snapshot(request, install)), fresh=fresh
    )


@routes.get("/installs/{id}/live")
async def live(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Server-sent events: the runs table (with the header badge) and the gate panel, sent again
    whenever they change."""
    svc = services(request)
    install = await svc.installs.owned(viewer.principal, request.match_info["id"])
    env = aiohttp_jinja2.get_env(request.app)
    rows_template = env.get_template("partials/run_rows.html")
    gate_template = env.get_template("partials/gates.html")
    badge_template = env.get_template("partials/badge.html")

    async def changes() -> AsyncIterator[dict[str, Any]]:
        nonlocal install
        seen_runs: object = None
        seen_gates: object = None
        checked = time.monotonic()
        # Stop as soon as the browser has gone (the keep-alive write would notice only later).
        while request.transport is not None and not request.transport.is_closing():
            if time.monotonic() - checked >= RECHECK_S:
                # The viewer may have lost the install (left the org, key revoked): 404 ends the stream.
                install = await svc.installs.owned(viewer.principal, install["_id"])
                checked = time.monotonic()
            try:
                current = await snapshot(request, install)
            except Busy:
                await asyncio.sleep(LIVE_POLL_S)  # the gate is full: this refresh waits for the next
                continue
            runs, gates = current.runs, current.gates
            marks = [(r["id"], r["status"]) for r in runs]
            gate_marks = (
                [r["id"] for r in gates["paused"]],
                [(d["draft"]["id"], d["draft"]["status"]) for d in gates["drafts"]],
                gates["targets"]["total"],
            )
            event: dict[str, Any] = {}
            if marks != seen_runs:
                seen_runs = marks
                event["runs"] = rows_template.render(runs=runs, install=install)
                event["badge"] = badge_template.render(badge=badge(install, runs[0] if runs else None))
            if gate_marks != seen_gates:
                seen_gates = gate_marks
                event["gates"] = gate_template.render(gates=gates, install=install, viewer=viewer)
            if event:
                yield event
            await asyncio.sleep(LIVE_POLL_S)

    return await relay(request, changes())
