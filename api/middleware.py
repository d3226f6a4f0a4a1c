"""Middlewares: request id and access log, error bodies, rate limits."""

from __future__ import annotations

import logging
import re
import time
import traceback
import uuid

from aiohttp import web
from aiohttp.typedefs import Handler

from api.clientip import client_ip
from api.context import PATH_REDACTOR, REQUEST_ID, services
from api.errors import error_response, from_http_exception, known_error
from api.logs import CREDENTIAL_PARAMS, request_id_var
from api.metrics import PATH as METRICS_PATH
from api.metrics import route_template
from plugins import tracing

log = logging.getLogger("svc.access")
error_log = logging.getLogger("svc.errors")

REQUEST_ID_PATTERN = re.compile(r"[A-Za-z0-9._-]{8,64}")
# Probes and scrapes, every few seconds from machines: no trace is wanted of them.
UNTRACED = frozenset({METRICS_PATH, "/api/health"})


@web.middleware
async def request_context(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Give the request an id, turn every failure into a JSON error body, log one line."""
    offered = request.headers.get("X-Request-Id", "")
    request_id = offered if REQUEST_ID_PATTERN.fullmatch(offered) else uuid.uuid4().hex
    request[REQUEST_ID] = request_id
    token = request_id_var.set(request_id)
    started = time.perf_counter()
    # Credentials in paths (webhook and invitation tokens) never reach a log line.
    path = request.app[PATH_REDACTOR](request.path)
    try:
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:  # a redirect raised by a page: logged like any answer, then raised
                log.info(
                    "%s %s %s",
                    request.method,
                    path,
                    exc.status,
                    extra={
                        "requestId": request_id,
                        "status": exc.status,
                        "ms": round((time.perf_counter() - started) * 1000, 2),
                    },
                )
                raise
            response = from_http_exception(exc)
        except Exception as exc:
            known = known_error(exc)
            if known is None:
                if path == request.path:
                    error_log.exception("unhandled error on %s %s", request.method, path)
                else:  # a credential in the path: its value may be quoted in the traceback
                    error_log.error(
                        "unhandled error on %s %s",
                        request.method,
                        path,
                        extra={"exc": scrubbed_traceback(exc, request)},
                    )
                known = error_response(500, "Internal server error", requestId=request_id)
            elif known.status >= 500:
                error_log.warning("%s on %s %s", type(exc).__name__, request.method, path)
            response = known
        if not response.prepared:
            response.headers["X-Request-Id"] = request_id
        elapsed_ms = round((time.perf_counter() - started) * 1000, 2)
        log.info(
            "%s %s %s",
            request.method,
            path,
            response.status,
            extra={"requestId": request_id, "status": response.status, "ms": elapsed_ms},
        )
        return response
    finally:
        request_id_var.reset(token)


def scrubbed_traceback(exc: BaseException, request: web.Request) -> str:
    """The traceback with every credential taken from the path replaced by its parameter name.

    An exception's message may quote its input (a KeyError of the token, say); the
    path's credential values are known here, so they are cut out wherever they appear.
    """
    text = "".join(traceback.format_exception(exc))
    for name, value in request.match_info.items():
        if name in CREDENTIAL_PARAMS and value:
            text = text.replace(value, "{" + name + "}")
    return text


@web.middleware
async def rate_limit(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Count the request against the client's limits before anything else runs.

    Metric scrapes are not counted: a scraper behind the same address as users must not be
    refused, nor use up their allowance (protect /metrics with SVC_METRICS_TOKEN instead).
    """
    svc = services(request)
    limiter = svc.rate_limiter
    if limiter is not None and request.path != METRICS_PATH:
        await limiter.hit(client_ip(request, svc.settings.trusted_proxies), request.method, request.path)
    return await handler(request)


@web.middleware
async def traced(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The request as a server span (outermost): a valid incoming `traceparent` makes it, and the
    runs it asks for, part of the caller's trace; a malformed one is ignored. The path is logged
    with its credentials cut out, as in the access log (docs/observability.md, "Traces")."""
    if not tracing.enabled() or request.path in UNTRACED:
        return await handler(request)
    route = route_template(request)
    path = request.app[PATH_REDACTOR](request.path)
    with tracing.server_span(
        request.method, None if route == "unmatched" else route, path, request.scheme, request.headers
    ) as span:
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            span.status_code(exc.status, server=True)
            raise
        span.status_code(response.status, server=True)
        return response
