"""Serving the app: aiohttp's runner with JSON answers for requests its parser refuses.

aiohttp answers a request its HTTP parser cannot read (request line or header too
long, bad method, bad chunking, a control character in a header) before any
middleware runs, with a `text/plain` 400 that quotes the offending bytes, and logs
the same bytes with a traceback. Those bytes are often a session cookie or an API
key. No middleware, signal or setting reaches that path, so the connection
handler is replaced: its `handle_error` answers `{"error": ...}` naming only the
kind of fault, and logs one line without the input.
"""

from __future__ import annotations

import logging

from aiohttp import http_exceptions, web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

log = logging.getLogger("svc.errors")

# The answer for each parser fault, most specific class first; input is never quoted.
PARSER_FAULTS: tuple[tuple[type[Exception], str], ...] = (
    (http_exceptions.LineTooLong, "Request line or header too large"),
    (http_exceptions.BadHttpMethod, "Bad HTTP method"),
    (http_exceptions.BadStatusLine, "Bad request line"),
    (http_exceptions.InvalidURLError, "Bad request target"),
    (http_exceptions.InvalidHeader, "Bad header"),
    (http_exceptions.TransferEncodingError, "Bad chunked encoding"),
    (http_exceptions.ContentLengthError, "Body shorter than Content-Length"),
    (http_exceptions.PayloadEncodingError, "Bad body encoding"),
    (http_exceptions.BadHttpMessage, "Bad HTTP request"),
)


def fault_message(status: int, exc: BaseException | None) -> str:
    """What the client is told: the kind of fault, never the bytes that caused it."""
    for kind, message in PARSER_FAULTS:
        if isinstance(exc, kind):
            return message
    if status == 504:
        return "Request timed out"
    if status >= 500:
        return "Internal server error"
    return "Bad HTTP request"


class JsonErrorRequestHandler(RequestHandler):
    """aiohttp's connection handler, answering parser and last-resort errors as JSON."""

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """Answer `{error}` without echoing input; log the fault's kind, not its bytes."""
        kind = type(exc).__name__ if exc is not None else "error"
        if status >= 500:
            # A handler fault the middleware did not catch: the traceback names code, not input.
            log.error("request failed outside the middleware: %s", kind, exc_info=exc)
        else:
            log.warning("bad HTTP request refused: %s", kind, extra={"status": status})
        if request.writer.output_size > 0:
            raise ConnectionError("Response is sent already, cannot send another response")
        response = web.json_response({"error": fault_message(status, exc)}, status=status)
        response.force_close()
        return response


class JsonErrorServer(web.Server):
    """An aiohttp low-level server whose connections use `JsonErrorRequestHandler`."""

    def __call__(self) -> RequestHandler:
        """A handler for one new connection."""
        return JsonErrorRequestHandler(self, loop=self._loop, **self._kwargs)


class ServiceRunner(web.AppRunner):
    """`web.AppRunner` serving through `JsonErrorServer`: `svc serve` (api/lifecycle.py) and tests."""

    async def _make_server(self) -> web.Server:
        """aiohttp's server for the app, rebuilt on the JSON error handler."""
        server = await super()._make_server()
        return JsonErrorServer(
            server.request_handler,
            request_factory=server.request_factory,
            handler_cancellation=server.handler_cancellation,
            loop=server._loop,
            **server._kwargs,
        )
