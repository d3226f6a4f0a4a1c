"""/docs in a real browser: headless Chromium renders every tag of the document, with no console
error, no uncaught exception and nothing refused by the page's Content-Security-Policy.

Chromium is Debian's `chromium` package, driven over the DevTools protocol (a websocket,
with aiohttp's client), so no browser-automation package is needed. Without Chromium the
test skips on a developer machine and fails under CI (`CI` set), as the dashboard's
browser tests do.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.waiting import wait_until

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
DEADLINE_S = 90.0


def browser() -> str:
    """The Chromium executable, or a skip (a failure under CI) saying how to install one."""
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    message = "no Chromium found; install it with `apt-get install chromium`"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


class Page:
    """One tab over the DevTools protocol: commands, and every event kept for the checks."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse, session: str) -> None:
        self.socket = socket
        self.session = session
        self.events: list[dict[str, Any]] = []
        self.ids = itertools.count(100)
        self.replies: dict[int, asyncio.Future[dict[str, Any]]] = {}

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        """Send a command to the tab and wait for its reply."""
        message_id = next(self.ids)
        reply = self.replies[message_id] = asyncio.get_running_loop().create_future()
        await self.socket.send_json(
            {"id": message_id, "sessionId": self.session, "method": method, "params": params}
        )
        return await asyncio.wait_for(reply, DEADLINE_S)

    def receive(self, message: dict[str, Any]) -> None:
        """Route one message: a reply to its command, an event to the log."""
        if "id" in message and message["id"] in self.replies:
            self.replies.pop(message["id"]).set_result(message.get("result", message))
        elif "method" in message:
            self.events.append(message)

    def problems(self) -> list[str]:
        """Console errors, uncaught exceptions and browser log entries at error level (CSP refusals)."""
        found = []
        for event in self.events:
            params = event.get("params", {})
            if event["method"] == "Runtime.exceptionThrown":
                found.append(json.dumps(params.get("exceptionDetails", {}))[:400])
            elif event["method"] == "Runtime.consoleAPICalled" and params.get("type") == "error":
                found.append(json.dumps(params.get("args", []))[:400])
            elif event["method"] == "Log.entryAdded" and params["entry"]["level"] == "error":
                found.append(f"{params['entry']['source']}: {params['entry']['text']}"[:400])
        return found


@asynccontextmanager
async def chromium(executable: str, profile: Path) -> AsyncIterator[Page]:
    """A headless Chromium with one tab attached; the browser is ended on the way out."""
    process = await asyncio.create_subprocess_exec(
        executable,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--remote-debugging-port=0",
        f"--user-data-dir={profile}",
        "about:blank",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stderr is not None
        endpoint = None
        while endpoint is None:
            line = (await asyncio.wait_for(process.stderr.readline(), DEADLINE_S)).decode()
            assert line, "Chromium exited before it listened"
            match = re.search(r"DevTools listening on (ws://\S+)", line)
            endpoint = match.group(1) if match else None
        async with aiohttp.ClientSession() as http, http.ws_connect(endpoint, max_msg_size=0) as socket:
            await socket.send_json(
                {"id": 1, "method": "Target.createTarget", "params": {"url": "about:blank"}}
            )
            target = await _reply(socket, 1)
            await socket.send_json(
                {
                    "id": 2,
                    "method": "Target.attachToTarget",
                    "params": {"targetId": target["targetId"], "flatten": True},
                }
            )
            page = Page(socket, (await _reply(socket, 2))["sessionId"])
            reader = asyncio.create_task(_read(socket, page))
            try:
                yield page
            finally:
                reader.cancel()
    finally:
        process.kill()
        await process.wait()


async def _reply(socket: aiohttp.ClientWebSocketResponse, message_id: int) -> dict[str, Any]:
    """The result of a browser-level command (events before it are not needed)."""
    while True:
        message = json.loads((await asyncio.wait_for(socket.receive(), DEADLINE_S)).data)
        if message.get("id") == message_id:
            return dict(message["result"])


async def _read(socket: aiohttp.ClientWebSocketResponse, page: Page) -> None:
    async for message in socket:
        if message.type == aiohttp.WSMsgType.TEXT:
            page.receive(json.loads(message.data))


async def test_docs_renders_in_chromium_without_errors_or_refusals(client: Any, tmp_path: Path) -> None:
    executable = browser()
    document = await (await client.get("/api/openapi.json")).json()
    tags = len(document["tags"])
    async with chromium(executable, tmp_path / "profile") as page:
        for domain in ("Page", "Runtime", "Log"):
            await page.send(f"{domain}.enable")
        await page.send("Page.navigate", url=str(client.server.make_url("/docs")))
        rendered = 0

        async def all_rendered() -> bool:
            nonlocal rendered
            result = await page.send(
                "Runtime.evaluate", expression="document.querySelectorAll('[data-tag]').length"
            )
            rendered = result["result"].get("value", 0)
            return bool(rendered == tags)

        await wait_until(all_rendered, timeout_s=DEADLINE_S, interval_s=0.2)
        assert rendered == tags, f"{rendered} of {tags} tags rendered; {page.problems()}"
        # A refused inline script or style, or a blocked fetch, is logged at error level.
        assert page.problems() == []
