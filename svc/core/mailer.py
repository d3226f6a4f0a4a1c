"""Outgoing mail. Every message is recorded in the `outbox` collection; with
SVC_SMTP_URL set it is also sent over SMTP (in a thread, so the loop never blocks).
"""

from __future__ import annotations

import asyncio
import logging
import smtplib
from email.message import EmailMessage
from urllib.parse import unquote, urlsplit

from svc.core import tokens
from svc.core.clock import utcnow
from svc.core.store import Store

log = logging.getLogger(__name__)

SENDER = "svc <no-reply@svc.local>"
SMTP_TIMEOUT_S = 15


class Mailer:
    """Sends mail (the mailer port of the domain)."""

    def __init__(self, store: Store, smtp_url: str | None = None) -> None:
        self.store = store
        self.smtp_url = smtp_url

    async def send(self, to: str, subject: str, body: str, kind: str) -> None:
        """Record the message, then deliver it over SMTP when configured."""
        subject = " ".join(subject.split())  # no CR/LF: they would start new headers
        message_id = tokens.new_id()
        record = {
            "_id": message_id,
            "to": to,
            "subject": subject,
            "body": body,
            "kind": kind,
            "status": "queued" if self.smtp_url else "recorded",
            "createdAt": utcnow(),
        }
        await self.store["outbox"].insert_one(record)
        if not self.smtp_url:
            log.info("mail recorded in the outbox (no SMTP configured)", extra={"mailKind": kind})
            return
        try:
            await asyncio.to_thread(self._deliver, to, subject, body)
        except (OSError, ValueError, smtplib.SMTPException) as exc:
            log.warning("mail delivery failed: %s", type(exc).__name__, extra={"mailKind": kind})
            await self.store["outbox"].update_one({"_id": message_id}, {"$set": {"status": "failed"}})
            return
        # Once delivered the body is dropped: it may carry a credential (an invitation link).
        await self.store["outbox"].update_one(
            {"_id": message_id}, {"$set": {"status": "sent", "sentAt": utcnow()}, "$unset": {"body": ""}}
        )

    def _deliver(self, to: str, subject: str, body: str) -> None:
        assert self.smtp_url is not None
        url = urlsplit(self.smtp_url)
        message = EmailMessage()
        message["From"], message["To"], message["Subject"] = SENDER, to, subject
        message.set_content(body)
        with smtplib.SMTP(url.hostname or "127.0.0.1", url.port or 25, timeout=SMTP_TIMEOUT_S) as smtp:
            if url.scheme == "smtp+starttls":
                smtp.starttls()
            if url.username:
                smtp.login(unquote(url.username), unquote(url.password or ""))
            smtp.send_message(message)
