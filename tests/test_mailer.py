"""The mailer records every message and delivers it over real SMTP (plain, STARTTLS, implicit TLS);
a failed send stays in the outbox and the job runner retries it with backoff."""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

import svc.core.metric_counters as metric_counters
from svc.core.clock import aware, utcnow
from svc.core.mailer import MAX_ATTEMPTS, Mailer, backoff
from svc.jobs import Jobs
from svc.subprocesses.embedded_db import free_port
from tests.fakes.smtp import SmtpSink


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own CA) and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "svc test mail")])
    now = dt.datetime.now(dt.UTC)
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, ssl.SSLContext]:
    cert_path, key_path = self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    return cert_path, context


@pytest.fixture
async def sinks():
    started: list[SmtpSink] = []

    async def start(**options) -> SmtpSink:
        sink = await SmtpSink(**options).start()
        started.append(sink)
        return sink

    yield start
    for sink in started:
        await sink.stop()


async def outbox(store, to: str):
    return await store["outbox"].find_one({"to": to})


async def test_without_smtp_mail_goes_to_the_outbox(store):
    await Mailer(store).send("a@example.com", "Hello", "Body text", kind="test.kind")
    record = await outbox(store, "a@example.com")
    assert (record["subject"], record["kind"], record["status"]) == ("Hello", "test.kind", "recorded")
    assert await Mailer(store).retry_due() == 0


async def test_smtp_delivery_with_the_configured_sender(store, sinks):
    sink = await sinks()
    mailer = Mailer(store, f"smtp://user%40x:p%40ss@127.0.0.1:{sink.port}", sender="Acme <ops@acme.test>")
    await mailer.send("b@example.com", "Version 2 is out", "Details here", kind="test.kind")
    assert sink.recipients == [["b@example.com"]]
    message = sink.messages[0]
    assert (message["Subject"], message["To"], message["From"]) == (
        "Version 2 is out",
        "b@example.com",
        "Acme <ops@acme.test>",
    )
    assert "Details here" in message.get_payload() and message["Message-ID"].endswith("@acme.test>")
    assert sink.logins, "credentials from the URL were used"
    assert sink.encrypted == [False], "a server without STARTTLS is spoken to in plain text"
    record = await outbox(store, "b@example.com")
    assert (record["status"], record["attempts"]) == ("sent", 1) and record["sentAt"]


async def test_implicit_tls(store, sinks, certificate):
    cert_path, context = certificate
    sink = await sinks(tls=context, implicit=True)
    mailer = Mailer(store, f"smtps://u:p@127.0.0.1:{sink.port}?cafile={cert_path}")
    await mailer.send("tls@example.com", "S", "B", kind="test.kind")
    assert sink.encrypted == [True] and sink.logins
    assert (await outbox(store, "tls@example.com"))["status"] == "sent"


async def test_starttls_when_offered_and_required_when_asked(store, sinks, certificate):
    cert_path, context = certificate
    sink = await sinks(tls=context)
    await Mailer(store, f"smtp://u:p@127.0.0.1:{sink.port}?cafile={cert_path}").send(
        "starttls@example.com", "S", "B", kind="test.kind"
    )
    assert sink.encrypted == [True], "STARTTLS was used because the server offered it"
    assert (await outbox(store, "starttls@example.com"))["status"] == "sent"

    plain = await sinks()
    await Mailer(store, f"smtp+starttls://127.0.0.1:{plain.port}").send("must@example.com", "S", "B", "k")
    record = await outbox(store, "must@example.com")
    assert plain.messages == [] and record["status"] == "queued"
    assert "STARTTLS" in record["lastError"]


async def test_an_untrusted_certificate_is_not_sent_to(store, sinks, certificate):
    _, context = certificate
    sink = await sinks(tls=context, implicit=True)
    await Mailer(store, f"smtps://u:secret-pw@127.0.0.1:{sink.port}").send("x@example.com", "S", "B", "k")
    record = await outbox(store, "x@example.com")
    assert sink.messages == [] and sink.logins == [], "no credentials went to an unverified server"
    assert record["status"] == "queued" and record["lastError"].startswith("TLS")
    assert "secret-pw" not in str(record)


async def test_a_refused_message_stays_queued_and_the_job_runner_retries_it(store, sinks):
    sink = await sinks(refuse_data=1)
    mailer = Mailer(store, f"smtp://127.0.0.1:{sink.port}")
    await mailer.send("retry@example.com", "S", "B", kind="test.kind")
    record = await outbox(store, "retry@example.com")
    assert sink.messages == [] and record["status"] == "queued", "nothing is sent until accepted"
    assert record["attempts"] == 1 and "451" in record["lastError"]
    wait = aware(record["nextAttemptAt"]) - aware(record["lastAttemptAt"])
    assert backoff(1) <= wait < backoff(1) + dt.timedelta(seconds=30)

    jobs = Jobs(store, billing_cron="0 0 1 * *", charges=None, poll=None, poll_seconds=300, mailer=mailer)
    await jobs.tick(utcnow())  # not due yet
    assert sink.messages == []
    await jobs.tick(aware(record["nextAttemptAt"]) + dt.timedelta(seconds=1))
    assert len(sink.messages) == 1
    record = await outbox(store, "retry@example.com")
    assert (record["status"], record["attempts"]) == ("sent", 2) and "nextAttemptAt" not in record
    counted = store[metric_counters.COLLECTION]
    failures = await counted.find_one({"name": "mail_failures", "labels.final": "false"})
    assert failures["value"] == 1


async def test_concurrent_job_runners_send_a_due_message_once(store, sinks):
    sink = await sinks(refuse_data=1)
    mailer = Mailer(store, f"smtp://127.0.0.1:{sink.port}")
    await mailer.send("once@example.com", "S", "B", kind="test.kind")
    later = utcnow() + dt.timedelta(hours=3)
    others = [Mailer(store, f"smtp://127.0.0.1:{sink.port}") for _ in range(4)]
    sent = await asyncio.gather(*(m.retry_due(later) for m in others))
    assert sum(sent) == 1 and len(sink.messages) == 1


async def test_after_the_last_attempt_the_message_is_failed(store):
    mailer = Mailer(store, f"smtp://127.0.0.1:{free_port()}")
    await mailer.send("c@example.com", "S", "B", kind="test.kind")
    moment = utcnow()
    for _ in range(MAX_ATTEMPTS + 2):
        moment += dt.timedelta(hours=3)
        await mailer.retry_due(moment)
    record = await outbox(store, "c@example.com")
    assert (record["status"], record["attempts"]) == ("failed", MAX_ATTEMPTS)
    assert record["lastError"] in {"ConnectionRefusedError", "OSError"}
    counted = store[metric_counters.COLLECTION]
    final = await counted.find_one({"name": "mail_failures", "labels.final": "true"})
    assert final["value"] == 1
