"""Requests aiohttp's parser refuses get a JSON `{error}` that echoes nothing they sent."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web

from api.app import create_app
from api.logs import JsonFormatter
from api.server import ServiceRunner
from config.settings import Settings
from svc.core import Store

SECRET = "svc_session_secret_value_0123456789"

BAD_REQUESTS: list[tuple[str, bytes, str]] = [
    (
        "header too large",
        b"GET /api/health HTTP/1.1\r\nHost: x\r\nCookie: svc_session="
        + SECRET.encode()
        + b"S" * 9000
        + b"\r\n\r\n",
        "Request line or header too large",
    ),
    (
        "request line too large",
        b"GET /" + SECRET.encode() + b"A" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        "Request line or header too large",
    ),
    ("bad method", b"G@T /" + SECRET.encode() + b" HTTP/1.1\r\nHost: x\r\n\r\n", "Bad HTTP method"),
    (
        "bad chunking",
        b"POST /api/auth/login HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ"
        + SECRET.encode()
        + b"\r\n0\r\n\r\n",
        "Bad HTTP request",
    ),
    (
        "control character in a header",
        b"GET /api/health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + SECRET.encode() + b"\x01\r\n\r\n",
        "Bad HTTP request",
    ),
]


@pytest.fixture
async def served(
    make_settings: Callable[..., Settings], store: Store, ray_session: None
) -> AsyncIterator[int]:
    """The real app served the way `svc serve` serves it; yields the port."""
    runner = ServiceRunner(create_app(make_settings()), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


async def exchange(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes; the status, headers and body of the answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    data = await reader.read()
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split(" ")[1]), {k.lower(): v for k, v in headers.items()}, body


@pytest.mark.parametrize(("case", "raw", "message"), BAD_REQUESTS, ids=[c[0] for c in BAD_REQUESTS])
async def test_parser_errors_are_json_and_echo_nothing(served, caplog, case, raw, message):
    caplog.set_level(logging.DEBUG)
    status, headers, body = await exchange(served, raw)
    assert status == 400
    assert headers["content-type"].startswith("application/json")
    assert json.loads(body) == {"error": message}
    assert SECRET.encode() not in body
    formatter = JsonFormatter()
    text = "\n".join(formatter.format(record) for record in caplog.records)
    assert SECRET not in text
    assert "bad HTTP request refused" in text


async def test_a_good_request_still_works(served):
    raw = b"GET /api/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    status, headers, _body = await exchange(served, raw)
    assert status == 200
    assert headers["content-type"].startswith("application/json")
