"""A client leaving a stream is how streams end, never an error in the log (issue 37).

Each test opens a stream over real HTTP, reads its first event, goes away while the stream
is still live, waits for the request's access line (the handler has finished), and then
reads the log records the app wrote: none is a warning or an error, none carries a traceback.

The app is served as `svc serve` serves it (`api.server.ServiceRunner`, whose handlers aiohttp
does not cancel when the client leaves: the next write fails instead). aiohttp's test server
cancels them, which hides exactly the failure these tests are about.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from api.app import create_app
from api.server import ServiceRunner
from tests.support.runtime import member, provider_settings, start_llm, svc_install
from tests.support.waiting import eventually, wait_status

# Every wait of these tests: generous, for a machine loaded by other test runs (the run's actor
# starts cold, and the run settles after its one slow model call).
READ_TIMEOUT_S = 120.0


class ServedAsInProduction(TestServer):
    """The test server on `svc serve`'s runner, with aiohttp's production default: a handler
    whose client left runs on until its next write fails."""

    async def _make_runner(self, **kwargs: Any) -> ServiceRunner:
        return ServiceRunner(self.app, **{**kwargs, "handler_cancellation": False})


@pytest.fixture
async def client(aiohttp_client, aiohttp_server, make_settings, store, ray_session):
    """A client of the app served as in production, its runtime on a fake providerA (`client.llm`)."""
    llm, url = await start_llm(aiohttp_server)
    app = create_app(make_settings(rate_limit_multiplier=None, providers=provider_settings(url)))
    served = await aiohttp_client(ServedAsInProduction(app))
    served.llm = llm
    return served


async def first_event(response: Any) -> bytes:
    """The stream's first event line, past any keep-alive comment and the blank line that ends it
    (a loaded machine may take a while to start the run's actor)."""
    while True:
        line = await asyncio.wait_for(response.content.readline(), READ_TIMEOUT_S)
        assert line, "the stream ended before its first event"
        if not line.startswith(b":") and line.strip():
            return bytes(line)


def access_line(caplog: pytest.LogCaptureFixture, path: str) -> logging.LogRecord | None:
    """The access-log record of `GET path`, once the request's handler has finished."""
    return next(
        (r for r in caplog.records if r.name == "svc.access" and r.getMessage().startswith(f"GET {path} ")),
        None,
    )


def trouble(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Every record at warning level or above, or with a traceback."""
    return [
        f"{r.name} {r.levelname}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno >= logging.WARNING or r.exc_info
    ]


async def test_leaving_a_run_stream_mid_run_logs_no_error(client, store, caplog):
    caplog.set_level(logging.INFO)
    _, key, install_id = await svc_install(client, [member("lead"), member("helper", reportsTo="lead")])
    # The lead's first answer (a delegation) is stored with the run's first events; the helper's
    # call then waits until the watcher has gone: the stream is live when its watcher leaves.
    client.llm.script(tool_calls=[{"name": "delegate_helper", "arguments": {"task": "dig"}}])
    client.llm.hold_after = 1
    queued = await client.post(
        f"/api/installs/{install_id}/run", json={"task": "go", "wait": False}, headers=key
    )
    run_id = (await queued.json())["runId"]
    path = f"/api/installs/{install_id}/runs/{run_id}/stream"
    response = await client.get(path, headers=key)
    assert response.status == 200
    assert (await first_event(response)).startswith(b"id: ")  # the first event: the stream is live
    response.close()  # the watcher goes away mid-run
    client.llm.hold_after = None
    # The run's next event is written to a closed connection.
    await wait_status(store, run_id, "completed", READ_TIMEOUT_S)
    record = await eventually(
        lambda: access_line(caplog, path), "the stream's handler to finish", READ_TIMEOUT_S
    )
    assert trouble(caplog) == []
    assert record.getMessage().endswith(" 200")
    assert any(r.getMessage() == "client left the run stream" for r in caplog.records)


async def test_leaving_an_install_page_logs_no_error(client, caplog):
    caplog.set_level(logging.INFO)
    caller, _, install_id = await svc_install(client, [member("lead")])
    path = f"/installs/{install_id}/live"
    response = await client.get(path, headers=caller.cookie)
    assert response.status == 200
    assert (await first_event(response)).startswith(b"data: ")  # the page's first render
    response.close()  # the person leaves the install page
    record = await eventually(
        lambda: access_line(caplog, path), "the live stream's handler to finish", READ_TIMEOUT_S
    )
    assert trouble(caplog) == []
    assert record.getMessage().endswith(" 200")
    assert any(r.getMessage() == "client left the stream" for r in caplog.records)
