"""Browser tests: Debian's Chromium driven by Playwright for Python, one browser for all flows.

The service runs in a thread of its own (its own event loop, a real port) because
Playwright's sync API drives the browser from the test's thread; the fake LLM
provider runs beside it on that loop. The public URL is the server's real origin,
so the dashboard's Origin check sees what a browser sends.

Without Chromium the tests skip with one line saying how to install it, except in
CI (env `CI` set), where a missing browser is a failure.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import threading
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from aiohttp import web

from api.app import STORE, create_app
from config.settings import Settings
from svc.core.store import Store
from tests.fakes.llm import FakeLLM
from tests.support.runtime import provider_settings

T = TypeVar("T")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
INSTALL_HINT = "Chromium not found: run `apt-get install chromium` (Debian) to run the browser tests"


def chromium_path() -> str | None:
    """Debian's Chromium (or SVC_CHROMIUM), if present."""
    candidate = os.environ.get("SVC_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    return candidate if Path(candidate).is_file() else None


def free_port() -> int:
    """A port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LiveServer:
    """The service and a fake providerA on a loop in a background thread."""

    def __init__(self, make_settings: Callable[..., Settings]) -> None:
        self.make_settings = make_settings
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.runners: list[web.AppRunner] = []
        self.llm = FakeLLM("providerA")
        self.base = ""
        self.app: web.Application | None = None

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the server's loop and wait for it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=120)

    async def _serve(self, app: web.Application, port: int) -> None:
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        self.runners.append(runner)

    async def _start(self) -> None:
        llm_port = free_port()
        await self._serve(self.llm.app(), llm_port)
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        settings = self.make_settings(
            public_url=self.base,
            rate_limit_multiplier=None,
            providers=provider_settings(f"http://127.0.0.1:{llm_port}"),
        )
        self.app = create_app(settings)
        await self._serve(self.app, port)

    async def _stop(self) -> None:
        for runner in reversed(self.runners):
            await runner.cleanup()

    @property
    def store(self) -> Store:
        """The store the running service uses (call its coroutines through `call`)."""
        assert self.app is not None
        return self.app[STORE]

    def __enter__(self) -> LiveServer:
        self.thread.start()
        self.call(self._start())
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.call(self._stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)


class Api:
    """A plain HTTP client of the live service, for seeding what a flow starts from."""

    def __init__(self, base: str) -> None:
        self.http = httpx.Client(base_url=base, timeout=60)

    def signup(self, email: str, password: str = "correct horse battery", name: str = "Tester") -> str:
        """A new account; its session token."""
        response = self.http.post(
            "/api/auth/signup", json={"email": email, "password": password, "name": name}
        )
        assert response.status_code == 201, response.text
        token = response.cookies["svc_session"]
        self.http.cookies.clear()
        return str(token)

    def call(
        self, method: str, path: str, *, session: str | None = None, key: str | None = None, **kw: Any
    ) -> Any:
        """One request with a session or a key; the JSON answer (asserting success)."""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        if session:
            headers["Cookie"] = f"svc_session={session}"
        response = self.http.request(method, path, headers=headers, **kw)
        assert response.status_code < 300, (path, response.status_code, response.text)
        self.http.cookies.clear()
        return response.json() if response.content else None


@pytest.fixture(scope="module")
def browser(ray_session: None) -> Iterator[Any]:
    """One headless Chromium for the browser tests (they live in one module).

    Module-scoped, not session-scoped: Playwright's sync API keeps an event loop marked
    running on this thread while it is open, which the async tests that run later in
    the session could not live with. The database and Ray are started before it."""
    executable = chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        executable = None
    if executable is None:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and no browser is available. {INSTALL_HINT}")
        pytest.skip(INSTALL_HINT)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, headless=True)
        yield launched
        launched.close()


@pytest.fixture
def live(make_settings: Callable[..., Settings], ray_session: None) -> Iterator[LiveServer]:
    """The service on a real port, for this test."""
    with LiveServer(make_settings) as server:
        yield server


@pytest.fixture
def api(live: LiveServer) -> Iterator[Api]:
    """An HTTP client of the live service."""
    client = Api(live.base)
    yield client
    client.http.close()


class Tab:
    """A browser page that records console errors and failed requests, for the no-errors check."""

    def __init__(self, page: Any, base: str) -> None:
        self.page = page
        self.base = base
        self.errors: list[str] = []
        page.on("console", lambda msg: self.errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))

    def goto(self, path: str) -> Any:
        """Open a page of the service; it must not answer with an error."""
        response = self.page.goto(self.base + path)
        assert response is not None and response.status < 400, (path, response and response.status)
        return response

    def shot(self, name: str) -> None:
        """Take a screenshot of the flow's end; saved for the docs only when SVC_SCREENSHOTS is set
        (`SVC_SCREENSHOTS=1 make test` refreshes docs/screenshots/), so a test run leaves the
        checkout as it was."""
        image = self.page.screenshot(full_page=True)
        assert image.startswith(b"\x89PNG"), "the page rendered to an image"
        if os.environ.get("SVC_SCREENSHOTS"):
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            (SCREENSHOTS / f"{name}.png").write_bytes(image)

    def sign_in_as(self, session: str) -> None:
        """Carry a session made over the API into the browser."""
        self.page.context.add_cookies([{"name": "svc_session", "value": session, "url": self.base}])


@pytest.fixture
def tab(browser: Any, live: LiveServer) -> Iterator[Tab]:
    """A fresh browser context (no cookies) and page on the live service."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live.base)
    context.set_default_timeout(30_000)
    page = context.new_page()
    yield Tab(page, live.base)
    debug = os.environ.get("SVC_BROWSER_DEBUG")
    if debug:  # a file to keep the HTML of where the flow stopped, for a failing flow
        Path(debug).write_text(page.content())
    context.close()
