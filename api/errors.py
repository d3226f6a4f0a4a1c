"""The one place that turns errors into `{"error": ...}` responses."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from svc.core import errors

STATUS: dict[type[errors.ServiceError], int] = {
    errors.BadRequest: 400,
    errors.Unauthorized: 401,
    errors.PaymentRequired: 402,
    errors.Forbidden: 403,
    errors.NotFound: 404,
    errors.Conflict: 409,
    errors.Gone: 410,
    errors.Unprocessable: 422,
    errors.RateLimited: 429,
    errors.BadGateway: 502,
    errors.Unavailable: 503,
}

HTTP_MESSAGES = {
    400: "Bad request",
    404: "Not found",
    405: "Method not allowed",
    413: "Request body too large",
    415: "Unsupported media type",
}


def error_response(status: int, message: str, /, **extra: Any) -> web.Response:
    """A JSON error body with the given status."""
    return web.json_response({"error": message, **extra}, status=status)


def from_service_error(exc: errors.ServiceError) -> web.Response:
    """Map a domain error to its status (the nearest base class decides)."""
    status = next((code for cls, code in STATUS.items() if isinstance(exc, cls)), 400)
    response = error_response(status, exc.message, **exc.extra)
    if isinstance(exc, errors.RateLimited):
        response.headers["Retry-After"] = str(exc.retry_after)
    return response


def from_http_exception(exc: web.HTTPException) -> web.Response:
    """aiohttp's own 4xx (unknown path, wrong method, body too large) as JSON."""
    message = HTTP_MESSAGES.get(exc.status, exc.reason)
    response = error_response(exc.status, message)
    if "Allow" in exc.headers:
        response.headers["Allow"] = exc.headers["Allow"]
    return response
