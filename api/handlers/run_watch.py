"""Runs you can watch: the run detail and the run's live stream (K/S; docs/runs.md)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from aiohttp import web

from api.context import SERVICES, principal, services
from api.routing import RouteTable
from api.schemas.run_watch import RunDetailReply, RunEventStream
from svc.core import BadRequest, Document, NotFound, RuntimeFailure, iso
from svc.runtime import CLOSING, TERMINAL, redacted, settled_event

log = logging.getLogger(__name__)
routes = RouteTable()

KEEPALIVE_S = 15.0
# A stream lasts at most this long; the client reconnects with Last-Event-ID (EventSource does).
MAX_STREAM_S = 600.0
SETTLED = ("completed", "failed", "cancelled", "paused")
MAX_EVENT_ID = 10**12


@routes.get("/api/installs/{installId}/runs/{runId}", auth="K/S", response=RunDetailReply)
async def run_detail(request: web.Request) -> web.Response:
    """What happened in the run: status, steps, security log, gate, response, tokens and cost."""
    detail = await services(request).run_detail.get(
        principal(request), request.match_info["installId"], request.match_info["runId"]
    )
    return web.json_response(detail)


@routes.get("/api/installs/{installId}/runs/{runId}/stream", auth="K/S", response=RunEventStream)
async def run_stream(request: web.Request) -> web.StreamResponse:
    """Server-sent events of the run as it happens, from its first event (or after Last-Event-ID)."""
    svc = services(request)
    install_id, run_id = request.match_info["installId"], request.match_info["runId"]
    _, full = await svc.run_detail.access(principal(request), install_id)
    after = last_event_id(request)
    run = await svc.run_detail.exists(install_id, run_id)
    if run is None:
        raise NotFound("Run not found")
    if not svc.run_watch.has_room():
        raise RuntimeFailure("Too many run streams are open on this server; retry shortly")
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
    await response.prepare(request)
    try:
        if "runId" in run:  # a run another platform reported: its record is all there is
            if after < 1:
                await send(response, reported_event(run), full)
        elif run["status"] not in SETTLED:
            await follow(request, response, install_id, run_id, after, full)
        else:
            newest = await svc.run_watch.events.newest(run_id)
            if newest is None:  # ended without events (refused, cancelled while queued, older runs)
                if after < 1:
                    await send(response, {**settled_event(run), "seq": 1}, full)
            elif not (newest["seq"] <= after and newest["type"] in TERMINAL):
                await follow(request, response, install_id, run_id, after, full)
        await response.write_eof()
    except ConnectionResetError:  # the watcher went away: the ordinary end of a stream, not an error
        log.info("client left the run stream")
    except asyncio.CancelledError:
        log.info("client left the run stream")
        raise
    return response


async def follow(
    request: web.Request, response: web.StreamResponse, install_id: str, run_id: str, after: int, full: bool
) -> None:
    """Relay the run's events from the process's follower of the run until it comes to rest."""
    watch = services(request).run_watch
    subscription = watch.subscribe(install_id, run_id, after)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + MAX_STREAM_S
    try:
        while True:
            left = deadline - loop.time()
            if left <= 0:
                await response.write(b": the stream ends here; reconnect with Last-Event-ID\n\n")
                return
            event = await subscription.next(min(KEEPALIVE_S, left))
            if event is None:
                await response.write(b": keep-alive\n\n")
                continue
            if event is CLOSING:
                await response.write(b": the service is stopping; reconnect with Last-Event-ID\n\n")
                return
            await send(response, event, full)
            if event["type"] in TERMINAL and subscription.queue.empty():
                return
    finally:
        watch.unsubscribe(subscription)


async def send(response: web.StreamResponse, event: dict[str, Any], full: bool) -> None:
    """One event on the wire: `id: <seq>` and `data: <json>`."""
    body = event if full else redacted(event)
    await response.write(f"id: {event['seq']}\ndata: {json.dumps(body)}\n\n".encode())


def last_event_id(request: web.Request) -> int:
    """The id after which to resume (`Last-Event-ID`); 0 without one; 400 when it is not one of ours."""
    raw = request.headers.get("Last-Event-ID", "").strip()
    if not raw:
        return 0
    if not raw.isdigit() or int(raw) > MAX_EVENT_ID:
        raise BadRequest("Last-Event-ID: must be the id of an event of this stream")
    return int(raw)


def reported_event(record: Document) -> dict[str, Any]:
    """The one event of a run another platform reported (it ended before we heard of it)."""
    return {
        "seq": 1,
        "type": "completed" if record["status"] == "completed" else "failed",
        "at": iso(record.get("createdAt")),
        "status": record["status"],
        "agent": record.get("agentKey"),
        "inputTokens": record.get("inputTokens"),
        "outputTokens": record.get("outputTokens"),
        "error": record.get("errorMessage"),
    }


async def end_streams(app: web.Application) -> None:
    """On shut-down, end the open run streams at once (their clients reconnect elsewhere with
    Last-Event-ID) instead of holding the shut-down for up to MAX_STREAM_S."""
    if SERVICES in app:
        await app[SERVICES].run_watch.close()
