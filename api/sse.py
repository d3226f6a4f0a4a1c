"""Server-sent events: relay an iterator of events as `data: <json>` lines, as they come.

A comment line keeps the connection alive through long pauses. When the client
goes away the next write fails and the event iterator is closed, which closes the
upstream model stream; a client leaving is the ordinary end of a stream, logged at
info level, never as an error. A failure after the stream has started becomes an
`{error}` event, then a clean close (the status line is already sent).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from api.errors import event_error

log = logging.getLogger(__name__)

KEEPALIVE_S = 15.0
MAX_STREAM_S = 600.0


async def relay(request: web.Request, events: AsyncIterator[dict[str, Any]]) -> web.StreamResponse:
    """Stream the events to the client."""
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
    await response.prepare(request)
    iterator = aiter(events)
    pending: asyncio.Future[dict[str, Any]] | None = None
    deadline = asyncio.get_running_loop().time() + MAX_STREAM_S
    try:
        while True:
            if asyncio.get_running_loop().time() > deadline:
                await response.write(b'data: {"error": "The stream took too long and was stopped"}\n\n')
                break
            if pending is None:
                pending = asyncio.ensure_future(anext(iterator))
            done, _ = await asyncio.wait({pending}, timeout=KEEPALIVE_S)
            if not done:
                await response.write(b": keep-alive\n\n")
                continue
            finished, pending = pending, None
            try:
                event = finished.result()
            except StopAsyncIteration:
                break
            except Exception as exc:
                message = event_error(exc)
                if message is None:
                    log.exception("stream failed")
                event = {"error": message or "Internal server error"}
            await response.write(f"data: {json.dumps(event)}\n\n".encode())
            if "error" in event or event.get("done"):
                break
        await response.write_eof()
    except ConnectionResetError:
        # The browser went away (a tab closed, a page left): how a stream usually ends, not an
        # error. The response is returned as it is; aiohttp logs the request like any other.
        log.info("client left the stream")
    except asyncio.CancelledError:
        log.info("client left the stream")
        raise
    finally:
        if pending is not None and not pending.done():
            pending.cancel()
            # The generator must stop running before it can be closed.
            await asyncio.gather(pending, return_exceptions=True)
        closer = getattr(iterator, "aclose", None)
        if closer is not None:
            await closer()  # closes the upstream model stream
    return response
