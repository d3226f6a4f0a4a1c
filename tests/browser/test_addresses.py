"""The dashboard on whatever address a person opens it on (issue 37, item 1).

`svc serve` runs as a person starts it (`make serve PORT=9000`): a real subprocess on a port
of its own, not 8080, with SVC_PUBLIC_URL unset. Chromium signs up on 127.0.0.1 and signs in
on localhost, and a form posted to it from another site is still refused.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import uuid
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from cryptography.fernet import Fernet

from tests.browser.conftest import Tab
from tests.support.serve import Service

T = TypeVar("T")
PASSWORD = "correct horse battery"


class Served:
    """`svc serve --port 0` (any free port) driven from a loop of its own, for the sync browser API."""

    def __init__(self, data_dir: Path, secret_key: str) -> None:
        self.service = Service(data_dir, secret_key, local_ray=False)
        self.service.env.pop("SVC_PUBLIC_URL", None)  # unset: the case of a person's laptop
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.origin = ""

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the loop and wait for it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=240)

    def __enter__(self) -> Served:
        self.thread.start()
        self.origin = self.call(self.service.start())
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            assert self.call(self.service.stop(signal.SIGTERM)) == 0, self.service.stderr.decode()[-2000:]
            assert self.call(self.service.leftovers()) == []
        finally:
            self.service.kill()
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, ray_session: None) -> Iterator[Served]:
    """The real `svc serve` on a free port (never 8080), SVC_PUBLIC_URL unset; one for the module."""
    with Served(tmp_path_factory.mktemp("served") / "data", Fernet.generate_key().decode()) as service:
        yield service


def fresh_tab(browser: Any, base: str) -> Tab:
    """A page in a context of its own (no cookies) on `base`."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(30_000)
    return Tab(context.new_page(), base)


def test_sign_up_and_in_on_another_port_and_on_localhost(browser: Any, served: Served) -> None:
    port = int(served.origin.rsplit(":", 1)[1])
    assert port != 8080
    email = f"port-{uuid.uuid4().hex[:8]}@example.com"

    on_ip = fresh_tab(browser, f"http://127.0.0.1:{port}")
    on_ip.goto("/signup")
    on_ip.page.fill("input[name=name]", "Pat Port")
    on_ip.page.fill("input[name=email]", email)
    on_ip.page.fill("input[name=password]", PASSWORD)
    on_ip.page.click("button[type=submit]")
    on_ip.page.wait_for_selector("h1:has-text('My installs')")
    assert email in (on_ip.page.text_content("header") or "")
    on_ip.shot("dashboard-on-another-port")
    on_ip.page.click("button:has-text('Sign out')")
    on_ip.page.wait_for_url(f"{on_ip.base}/signin")

    on_localhost = fresh_tab(browser, f"http://localhost:{port}")
    on_localhost.goto("/signin")
    on_localhost.page.fill("input[name=email]", email)
    on_localhost.page.fill("input[name=password]", PASSWORD)
    on_localhost.page.click("button[type=submit]")
    on_localhost.page.wait_for_selector("h1:has-text('My installs')")
    # A signed-in form on localhost passes the CSRF and Origin checks too.
    on_localhost.goto("/keys")
    on_localhost.page.fill("input[name=label]", "from localhost")
    on_localhost.page.click("form.panel button[type=submit]")
    assert (on_localhost.page.text_content("#new-key") or "").startswith("svc_")
    assert on_ip.errors == [] and on_localhost.errors == []
    for tab in (on_ip, on_localhost):
        tab.page.context.close()


def test_a_form_posted_from_another_site_on_another_port_is_refused(browser: Any, served: Served) -> None:
    """A page of another origin (here an opaque one, as a sandboxed or data: page is) posts the
    sign-up form: the browser sends its own Origin and the service answers 403."""
    email = f"forged-{uuid.uuid4().hex[:8]}@example.com"
    tab = fresh_tab(browser, served.origin)
    tab.page.set_content(
        f'<form method="post" action="{served.origin}/signup">'
        f'<input name="email" value="{email}"><input name="password" value="{PASSWORD}">'
        '<button type="submit">go</button></form>'
    )
    with tab.page.expect_navigation() as navigation:
        tab.page.click("button")
    response = navigation.value
    assert response is not None and response.status == 403
    assert "refused" in (tab.page.text_content("main") or "")
    # Nothing was created: signing in with that address fails.
    tab.goto("/signin")
    tab.page.fill("input[name=email]", email)
    tab.page.fill("input[name=password]", PASSWORD)
    tab.page.click("button[type=submit]")
    tab.page.wait_for_selector("text=Invalid email or password")
    tab.page.context.close()

