"""Outgoing mail through the `outbox` collection.

Every message is first written to `outbox`. Without SVC_SMTP_URL it stays there
(`recorded`) and is logged. With it, the message is `queued` and sent at once; it
becomes `sent` only once the mail server has accepted it (the DATA command was
answered 250). A failed attempt leaves it `queued` with `attempts`, `lastError`
and `nextAttemptAt` (exponential backoff), and the scheduler's job runner
(`svc/jobs.py`) retries due messages until MAX_ATTEMPTS, after which it is
`failed`. Operators read these fields in `outbox` and the counters on /metrics
(docs/operations.md).

Transports: `smtps://` is implicit TLS (port 465 by default); `smtp://` upgrades
with STARTTLS whenever the server offers it (port 587 by default) and
`smtp+starttls://` insists on it. Certificates are verified against the system
store, or against `?cafile=/path/ca.pem` for a private CA. smtplib blocks, so each
attempt runs in a thread.
"""

from __future__ import annotations

import asyncio
import logging
import smtplib
import ssl
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.message import EmailMessage
from email.utils import make_msgid
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from pymongo.errors import DuplicateKeyError

from svc.core import metric_counters, tokens
from svc.core.clock import utcnow
from svc.core.store import Document, Store

log = logging.getLogger(__name__)

SENDER = "svc <no-reply@localhost>"
SMTP_TIMEOUT_S = 15
MAX_ATTEMPTS = 8
FIRST_RETRY = timedelta(minutes=1)
LONGEST_WAIT = timedelta(hours=2)
# While one process is sending a message, no other picks it up (longer than a send can take).
SENDING_LEASE = timedelta(minutes=5)
RETRY_BATCH = 20
DEFAULT_PORTS = {"smtp": 587, "smtp+starttls": 587, "smtps": 465}


def backoff(attempts: int) -> timedelta:
    """The wait after the n-th failed attempt: 1, 2, 4, ... minutes, at most two hours."""
    return min(FIRST_RETRY * 2 ** max(attempts - 1, 0), LONGEST_WAIT)


@dataclass(frozen=True)
class SmtpTarget:
    """Where and how to send, parsed once from SVC_SMTP_URL."""

    scheme: str
    host: str
    port: int
    username: str | None
    password: str | None
    cafile: str | None

    @classmethod
    def parse(cls, url: str) -> SmtpTarget:
        """The target of an `smtp://`, `smtp+starttls://` or `smtps://` URL."""
        parts = urlsplit(url)
        if parts.scheme not in DEFAULT_PORTS:
            raise ValueError(f"unsupported mail URL scheme {parts.scheme!r}")
        cafile = parse_qs(parts.query).get("cafile", [None])[0]
        return cls(
            scheme=parts.scheme,
            host=parts.hostname or "127.0.0.1",
            port=parts.port or DEFAULT_PORTS[parts.scheme],
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password or "") if parts.username else None,
            cafile=cafile,
        )

    def tls_context(self) -> ssl.SSLContext:
        """A verifying context (the private CA file when one is named)."""
        return ssl.create_default_context(cafile=self.cafile)


class Mailer:
    """Sends mail (the mailer port of the domain)."""

    def __init__(self, store: Store, smtp_url: str | None = None, sender: str = SENDER) -> None:
        self.store = store
        self.smtp_url = smtp_url
        self.sender = sender
        self.target = SmtpTarget.parse(smtp_url) if smtp_url else None

    async def send(self, to: str, subject: str, body: str, kind: str, message_id: str | None = None) -> None:
        """Record the message, then try to deliver it once now; failures are retried later.

        `message_id` names the message for a sender that may send it twice (a pipeline's Sender
        step resumed after a crash): a message already recorded under it is not sent again."""
        subject = " ".join(subject.split())  # no CR/LF: they would start new headers
        now = utcnow()
        record: dict[str, Any] = {
            "_id": message_id or tokens.new_id(),
            "to": to,
            "subject": subject,
            "body": body,
            "kind": kind,
            "status": "queued" if self.target else "recorded",
            "attempts": 0,
            "createdAt": now,
        }
        if self.target is None:
            if await self._record(record):
                log.info("mail recorded in the outbox (no SMTP configured)", extra={"mailKind": kind})
            return
        record["nextAttemptAt"] = now + SENDING_LEASE  # this call holds it while sending
        if await self._record(record):
            await self._attempt(record, now)

    async def _record(self, record: dict[str, Any]) -> bool:
        """Store the message; False when one with its id is stored already (it is not sent twice)."""
        try:
            await self.store["outbox"].insert_one(record)
        except DuplicateKeyError:
            return False
        return True

    async def retry_due(self, now: datetime | None = None) -> int:
        """Send the queued messages whose retry time has come; how many were sent."""
        if self.target is None:
            return 0
        now = now or utcnow()
        due = (
            await self.store["outbox"]
            .find({"status": "queued", "nextAttemptAt": {"$lte": now}})
            .sort("nextAttemptAt", 1)
            .to_list(RETRY_BATCH)
        )
        sent = 0
        for doc in due:
            # Claim it: the filter states the retry time read, so two schedulers never both send.
            claimed = await self.store["outbox"].find_one_and_update(
                {"_id": doc["_id"], "status": "queued", "nextAttemptAt": doc["nextAttemptAt"]},
                {"$set": {"nextAttemptAt": now + SENDING_LEASE}},
            )
            if claimed is not None and await self._attempt(claimed, now):
                sent += 1
        return sent

    async def _attempt(self, doc: Document, now: datetime) -> bool:
        """One delivery attempt; the outbox record says what happened. True when accepted."""
        attempts = int(doc.get("attempts") or 0) + 1
        try:
            await asyncio.to_thread(self._deliver, doc["_id"], doc["to"], doc["subject"], doc["body"])
        except (OSError, ValueError, smtplib.SMTPException) as exc:
            error = describe_failure(exc)
            gave_up = attempts >= MAX_ATTEMPTS
            update: dict[str, Any] = {"attempts": attempts, "lastError": error, "lastAttemptAt": now}
            if gave_up:
                update["status"] = "failed"
            else:
                update["nextAttemptAt"] = utcnow() + backoff(attempts)
            await self.store["outbox"].update_one({"_id": doc["_id"]}, {"$set": update})
            await metric_counters.inc(self.store, "mail_failures", {"final": "true" if gave_up else "false"})
            log.warning(
                "mail delivery failed (attempt %s of %s): %s",
                attempts,
                MAX_ATTEMPTS,
                error,
                extra={"mailKind": doc.get("kind"), "mailId": doc["_id"]},
            )
            return False
        await self.store["outbox"].update_one(
            {"_id": doc["_id"]},
            {
                "$set": {"status": "sent", "attempts": attempts, "sentAt": utcnow()},
                # Once delivered the body is dropped: it may carry a credential (an invitation link).
                "$unset": {"nextAttemptAt": "", "body": ""},
            },
        )
        return True

    def _deliver(self, mail_id: str, to: str, subject: str, body: str) -> None:
        """Hand the message to the server; returns only once the server has accepted it."""
        assert self.target is not None
        target = self.target
        message = EmailMessage()
        message["From"], message["To"], message["Subject"] = self.sender, to, subject
        # One Message-ID per outbox record: a retry after an unclear failure is recognisable.
        domain = self.sender.rsplit("@", 1)[-1].strip(" >") or "localhost"
        message["Message-ID"] = make_msgid(idstring=mail_id, domain=domain)
        message.set_content(body)
        smtp: smtplib.SMTP
        if target.scheme == "smtps":
            smtp = smtplib.SMTP_SSL(
                target.host, target.port, timeout=SMTP_TIMEOUT_S, context=target.tls_context()
            )
        else:
            smtp = smtplib.SMTP(target.host, target.port, timeout=SMTP_TIMEOUT_S)
        with smtp:
            if target.scheme != "smtps":
                smtp.ehlo()
                if smtp.has_extn("starttls"):
                    smtp.starttls(context=target.tls_context())
                    smtp.ehlo()
                elif target.scheme == "smtp+starttls":
                    raise smtplib.SMTPNotSupportedError("the server does not offer STARTTLS")
            if target.username:
                smtp.login(target.username, target.password or "")
            refused = smtp.send_message(message)
            if refused:
                raise smtplib.SMTPRecipientsRefused(refused)


async def queued_mail(store: Store) -> int:
    """How many messages wait for delivery or a retry (GET /metrics, `svc_mail_queued`)."""
    return await store["outbox"].count_documents({"status": "queued"})


def describe_failure(exc: BaseException) -> str:
    """A short, secret-free description of a failed attempt (for operators and logs)."""
    if isinstance(exc, smtplib.SMTPResponseException):
        text = (
            exc.smtp_error.decode(errors="replace")
            if isinstance(exc.smtp_error, bytes)
            else str(exc.smtp_error)
        )
        return f"{type(exc).__name__}: {exc.smtp_code} {' '.join(text.split())[:200]}"
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        return "SMTPRecipientsRefused: the server refused the recipient"
    if isinstance(exc, smtplib.SMTPException) and str(exc):
        return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    if isinstance(exc, ssl.SSLError):
        return f"TLS: {exc.reason or type(exc).__name__}"
    return type(exc).__name__
