"""Answering an audit timeline page: JSON `{events, nextCursor}`, or JSON lines when the client
asks for `application/x-ndjson` (one entry a line, the next cursor in `X-Next-Cursor`)."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

NDJSON = "application/x-ndjson"


def timeline_response(
    request: web.Request, events: list[dict[str, Any]], next_cursor: str | None
) -> web.Response:
    """The page in the form the client accepts."""
    if NDJSON in request.headers.get("Accept", ""):
        body = "".join(json.dumps(event, separators=(",", ":")) + "\n" for event in events)
        headers = {"X-Next-Cursor": next_cursor} if next_cursor else {}
        return web.Response(text=body, content_type=NDJSON, headers=headers)
    return web.json_response({"events": events, "nextCursor": next_cursor})
