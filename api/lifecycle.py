"""Start-up and shut-down of `svc serve`, in order and timed.

`svc serve` binds its socket first (a port in use fails before the database
and Ray start), then starts the application's cleanup contexts (database, Ray,
domain services), then accepts requests. On SIGTERM or SIGINT, or when start-up
fails, it undoes them in reverse: stop accepting, let in-flight requests end
(bounded by SVC_SHUTDOWN_GRACE_SECONDS), stop the services and the scheduler
it owns, disconnect from Ray (stopping a local Ray it started), stop the
embedded database it started and wait for it to exit. Each step's duration is
logged at debug level.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

from aiohttp import web

from api.server import ServiceRunner

log = logging.getLogger("svc.lifecycle")

CleanupContext = Callable[[web.Application], AsyncIterator[None]]
Entered = Callable[[web.Application], AbstractAsyncContextManager[None]]


class ListenError(Exception):
    """The address cannot be listened on; the message is one line for the operator."""


def timed(name: str, context: CleanupContext) -> Entered:
    """The cleanup context `context`, with its start-up and shut-down durations logged at debug level."""

    @contextlib.asynccontextmanager
    async def wrapper(app: web.Application) -> AsyncIterator[None]:
        started = time.monotonic()
        entered = contextlib.asynccontextmanager(context)(app)
        await entered.__aenter__()
        log.debug("start-up: %s in %.2fs", name, time.monotonic() - started)
        try:
            yield
        finally:
            started = time.monotonic()
            try:
                await entered.__aexit__(None, None, None)
            finally:
                log.debug("shut-down: %s in %.2fs", name, time.monotonic() - started)

    wrapper.__name__ = getattr(context, "__name__", name)
    return wrapper


def listen_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port, or ListenError with the reason in one line."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        reason = "address already in use" if exc.errno == errno.EADDRINUSE else os.strerror(exc.errno or 0)
        raise ListenError(f"cannot listen on {host}:{port}: {reason}") from None
    sock.setblocking(False)
    return sock


def origin(sock: socket.socket) -> str:
    """The http origin of a listening socket (with the port the kernel chose for port 0)."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def link_origin(sock: socket.socket) -> str:
    """Where links to a service on this socket should point: its origin, or for a wildcard
    address (0.0.0.0, ::), which no browser can open, the machine's host name."""
    host, port = sock.getsockname()[:2]
    if host in ("0.0.0.0", "::"):
        return f"http://{socket.gethostname()}:{port}"
    return origin(sock)


async def serve(app: web.Application, sock: socket.socket, grace_s: float) -> None:
    """Run the app on the socket until SIGTERM or SIGINT, then shut everything down in order."""
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()

    def request_stop(signum: int) -> None:
        if stopping.is_set():
            log.info("already stopping")
        else:
            log.info("%s received; stopping", signal.Signals(signum).name)
        stopping.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, request_stop, signum)
    begun = time.monotonic()

    async def requests_ended(_: web.Application) -> None:
        log.debug("shut-down: stopped accepting; in-flight requests ended in %.2fs", time.monotonic() - begun)

    # Runs before the cleanup contexts: in-flight requests have ended (or were cut at the grace).
    app.on_cleanup.insert(0, requests_ended)
    # aiohttp's runner, with JSON answers for requests its parser refuses (api/server.py).
    runner = ServiceRunner(app, handle_signals=False, access_log=None, shutdown_timeout=grace_s)
    try:
        started = time.monotonic()
        await runner.setup()
        if not stopping.is_set():  # a signal during start-up: stop without ever accepting
            site = web.SockSite(runner, sock, shutdown_timeout=grace_s)
            await site.start()
            log.debug("start-up: ready in %.2fs", time.monotonic() - started)
            print(f"listening on {origin(sock)}", flush=True)
            await stopping.wait()
    finally:
        begun = time.monotonic()
        await runner.cleanup()
        log.debug("shut-down: done in %.2fs", time.monotonic() - begun)
        sock.close()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
