"""The one place that turns errors into `{"error": ...}` responses: the domain's errors, the
plugins' errors and the runtime's, each class to one status."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from plugins.manager import PluginError
from plugins.types import PlatformError, ProviderError
from svc.core import (
    DATABASE_ERRORS,
    BadGateway,
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    NotFound,
    PaymentRequired,
    RateLimited,
    RuntimeFailure,
    ServiceError,
    Unauthorized,
    Unavailable,
    Unprocessable,
)
from svc.runtime import ProviderNotConfigured

STATUS: dict[type[ServiceError], int] = {
    BadRequest: 400,
    Unauthorized: 401,
    PaymentRequired: 402,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    Gone: 410,
    Unprocessable: 422,
    RateLimited: 429,
    BadGateway: 502,
    Unavailable: 503,
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


DATABASE_UNAVAILABLE = "Database unavailable"
# A database that cannot be reached or does not answer within SVC_DB_TIMEOUT_SECONDS
# (`svc.core.DATABASE_ERRORS`: the driver's timeout and connection errors) is one answer on every
# route (and the last event of a stream that has started).

# Errors raised outside the domain's own classes: (class, status, the message a client sees).
# The nearest class wins, so the subclass comes first.
FOREIGN: tuple[tuple[type[Exception], int, str | None], ...] = (
    (ProviderNotConfigured, 503, None),
    (ProviderError, 502, None),
    (PlatformError, 502, None),
    (RuntimeFailure, 503, None),
    (PluginError, 503, "A platform driver is unavailable"),
    *((cls, 503, DATABASE_UNAVAILABLE) for cls in DATABASE_ERRORS),
)
RETRY_AFTER_S = 5


def known_error(exc: BaseException) -> web.Response | None:
    """The response for any error this service expects, or None for a bug (a 500)."""
    if isinstance(exc, ServiceError):
        return from_service_error(exc)
    for cls, status, message in FOREIGN:
        if isinstance(exc, cls):
            text = message or getattr(exc, "detail", None) or str(exc)
            response = error_response(status, text)
            if status == 503:
                response.headers["Retry-After"] = str(RETRY_AFTER_S)
            return response
    return None


def event_error(exc: BaseException) -> str | None:
    """The message of an expected error, for an event stream that has already started."""
    if isinstance(exc, ProviderError):
        return f"Model provider error: {exc.detail}"
    if isinstance(exc, ServiceError):
        return exc.message
    if isinstance(exc, DATABASE_ERRORS):
        return DATABASE_UNAVAILABLE
    return None


def status_of(exc: ServiceError) -> int:
    """The HTTP status of a domain error (the nearest base class decides)."""
    return next((code for cls, code in STATUS.items() if isinstance(exc, cls)), 400)


def from_service_error(exc: ServiceError) -> web.Response:
    """Map a domain error to its response."""
    response = error_response(status_of(exc), exc.message, **exc.extra)
    # A rate limit's wait, or a heavy read that found no slot (api/heavy.py `Busy`).
    retry_after = getattr(exc, "retry_after", None)
    if retry_after is not None:
        response.headers["Retry-After"] = str(retry_after)
    return response


def from_http_exception(exc: web.HTTPException) -> web.Response:
    """aiohttp's own 4xx (unknown path, wrong method, body too large) as JSON."""
    message = HTTP_MESSAGES.get(exc.status, exc.reason)
    response = error_response(exc.status, message)
    if "Allow" in exc.headers:
        response.headers["Allow"] = exc.headers["Allow"]
    return response
