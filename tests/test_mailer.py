"""The mailer records every message and delivers it over real SMTP when configured."""

from __future__ import annotations

import pytest

from svc.core.embedded import free_port
from svc.core.mailer import Mailer
from tests.fakes.smtp import SmtpSink


@pytest.fixture
async def sink():
    server = await SmtpSink().start()
    yield server
    await server.stop()


async def test_without_smtp_mail_goes_to_the_outbox(store):
    await Mailer(store).send("a@example.com", "Hello", "Body text", kind="test.kind")
    record = await store["outbox"].find_one({"to": "a@example.com"})
    assert record["subject"] == "Hello"
    assert record["kind"] == "test.kind"
    assert record["status"] == "recorded"


async def test_smtp_delivery(store, sink):
    mailer = Mailer(store, f"smtp://user%40x:p%40ss@127.0.0.1:{sink.port}")
    await mailer.send("b@example.com", "Version 2 is out", "Details here", kind="test.kind")
    assert sink.recipients == [["b@example.com"]]
    message = sink.messages[0]
    assert message["Subject"] == "Version 2 is out"
    assert message["To"] == "b@example.com"
    assert "Details here" in message.get_payload()
    assert sink.logins, "credentials from the URL were used"
    record = await store["outbox"].find_one({"to": "b@example.com"})
    assert record["status"] == "sent"


async def test_smtp_failure_is_recorded_not_raised(store):
    mailer = Mailer(store, f"smtp://127.0.0.1:{free_port()}")
    await mailer.send("c@example.com", "S", "B", kind="test.kind")
    record = await store["outbox"].find_one({"to": "c@example.com"})
    assert record["status"] == "failed"
