"""Reading request bodies: JSON only, validated by a pydantic model, clear 400s."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from svc.core import BadRequest, describe

M = TypeVar("M", bound=BaseModel)


async def read_json(request: web.Request, max_bytes: int | None = None) -> Any:
    """The parsed body, or None when it is empty; 400 when it is not JSON.

    `max_bytes` caps a route below the app's body limit: 413, as aiohttp answers that limit.
    """
    if max_bytes is not None and (request.content_length or 0) > max_bytes:
        raise web.HTTPRequestEntityTooLarge(max_size=max_bytes, actual_size=request.content_length or 0)
    raw = await request.read()
    if max_bytes is not None and len(raw) > max_bytes:
        raise web.HTTPRequestEntityTooLarge(max_size=max_bytes, actual_size=len(raw))
    if not raw.strip():
        return None
    try:
        data = json.loads(raw)
        # Lone surrogates ("\\ud800") parse but cannot be stored or hashed: refuse them here.
        json.dumps(data, ensure_ascii=False).encode()
    except (ValueError, UnicodeError, RecursionError):
        raise BadRequest("Malformed JSON body") from None
    return data


async def parse_body(request: web.Request, model: type[M]) -> M:
    """Validate the body (an empty body counts as `{}`) against the model."""
    data = await read_json(request)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise BadRequest("Request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise BadRequest(describe(exc)) from None


def parse_query(request: web.Request, model: type[M]) -> M:
    """Validate the query string (values arrive as text; the model converts them)."""
    try:
        return model.model_validate(dict(request.query), strict=False)
    except ValidationError as exc:
        raise BadRequest(describe(exc)) from None
