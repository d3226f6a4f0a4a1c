"""Durable delivery of webhook-run callbacks (docs/webhooks.md).

A callback is written to `callbacks` (one document per run, `_id` = the run id) by the run's
settlement, in the same batch as its run record (`owe`, svc/runtime/settlement.py), before its
first attempt, so nothing is lost when a process stops: the job runner (`svc/jobs.py`)
retries due deliveries from any process, with exponential backoff and jitter, until the
receiver answers 2xx, refuses for good (another 4xx, or the egress guard), the attempts
run out (`SVC_CALLBACK_MAX_ATTEMPTS`) or 24 hours have passed since the delivery began.

Two processes never send the same attempt: an attempt is claimed first with a conditional
update that sets `leasedUntil` and a lease token (the claim names the `nextAttemptAt` it read),
and a process that dies mid-attempt leaves the lease to expire; an attempt's final update names
its token, so an older attempt whose lease was taken over cannot overwrite the newer outcome.
Each attempt is signed when it is sent, with the install's callback secret of that moment
(`Svc-Signature`, the Stripe scheme) and goes through the egress guard. Every attempt is kept
in `attempts` (status, latency, error) for the run detail; `redeliver` sends again on demand.

A paused pipeline run posts twice under one run id (at the gate, then at the end): the
second outcome replaces the body and starts a fresh delivery; the attempts list keeps both.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import random
import time
from datetime import datetime, timedelta
from typing import Any

import httpx

from plugins import tracing
from plugins.egress import EgressDenied, egress_client
from svc.core import Batch, Conflict, Document, NotFound, Store, Vault, aware, iso, new_id, utcnow
from svc.installs import find_install

log = logging.getLogger(__name__)

COLLECTION = "callbacks"
SIGNATURE_HEADER = "Svc-Signature"
DEFAULT_MAX_ATTEMPTS = 30
HORIZON = timedelta(hours=24)
FIRST_RETRY = timedelta(seconds=10)
LONGEST_WAIT = timedelta(hours=1)
JITTER = 0.2  # each wait is its backoff times a random factor in [0.8, 1.2]
# An attempt holds its delivery this long (longer than a send can take: the timeout is 15 s).
LEASE = timedelta(minutes=2)
SEND_TIMEOUT_S = 15.0
RETRY_BATCH = 20
KEPT_ATTEMPTS = 100
_random = random.SystemRandom()


def sign(body: bytes, secret: str, timestamp: int | None = None) -> str:
    """`t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">` (the Stripe scheme)."""
    stamp = int(time.time()) if timestamp is None else timestamp
    digest = hmac.new(secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={stamp},v1={digest}"


def backoff(tries: int) -> timedelta:
    """The wait after the n-th failed try: 10 s, 20 s, 40 s, ... at most an hour, with jitter
    (so receivers coming back up are not hit by every sender at once)."""
    base = min(FIRST_RETRY * 2 ** max(tries - 1, 0), LONGEST_WAIT)
    return base * _random.uniform(1 - JITTER, 1 + JITTER)


def callback_body(install_id: str, outcome: dict[str, Any]) -> str:
    """The JSON posted to the caller (the same fields as before delivery became durable)."""
    return json.dumps(
        {
            "runId": outcome["runId"],
            "installId": install_id,
            "status": outcome["status"],
            "response": outcome["response"],
            "inputTokens": outcome["inputTokens"],
            "outputTokens": outcome["outputTokens"],
            **({"pausedAtGate": outcome["pausedAtGate"]} if outcome.get("pausedAtGate") else {}),
        }
    )


def view(doc: Document) -> dict[str, Any]:
    """The wire form of a delivery record (the run detail and the redeliver answer)."""
    return {
        "runId": doc["_id"],
        "installId": doc["installId"],
        "url": doc["url"],
        "status": doc["status"],
        "attempts": [
            {
                "at": iso(a["at"]),
                "status": a.get("status"),
                "latencyMs": a.get("latencyMs"),
                "error": a.get("error"),
            }
            for a in doc.get("attempts") or []
        ],
        "nextAttemptAt": iso(doc.get("nextAttemptAt")) if doc["status"] == "pending" else None,
        "createdAt": iso(doc.get("createdAt")),
    }


class CallbackDelivery:
    """Stores, sends and retries callbacks; any process may run it (the actor, the job runner)."""

    def __init__(
        self,
        store: Store,
        vault: Vault,
        allow_private: bool,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> None:
        self.store = store
        self.vault = vault
        self.allow_private = allow_private
        self.max_attempts = max_attempts

    def owe(
        self,
        batch: Batch,
        install_id: str,
        url: str,
        outcome: dict[str, Any],
        phase: str,
        now: datetime,
        trace: dict[str, str] | None = None,
    ) -> None:
        """The callback of one outcome of a run, as operations of the run's settlement batch: stored
        due now, once per `phase` (a paused pipeline posts at its gate and again at its end: each
        outcome starts a fresh delivery; sending the batch again starts nothing twice). `trace`: the
        run's trace context, which every attempt joins, whichever process sends it (tracing, #33)."""
        run_id = outcome["runId"]
        batch.once(
            COLLECTION,
            {"_id": run_id},
            {"phase": {"$ne": phase}},
            {
                "$set": {
                    "url": url,
                    "body": callback_body(install_id, outcome),
                    "status": "pending",
                    "tries": 0,
                    "windowStart": now,
                    "nextAttemptAt": now,
                    "phase": phase,
                    **({"trace": trace} if trace else {}),  # attempts join the run's trace (tracing, #33)
                },
                "$unset": {"leasedUntil": "", "lease": ""},
            },
            {"installId": install_id, "attempts": [], "createdAt": now},
        )

    async def first_attempt(self, install: Document, run_id: str, now: datetime | None = None) -> bool:
        """Make the first attempt of a callback just stored (the run's actor, right after its
        settlement); True when delivered. A delivery another process holds is left to it."""
        now = now or utcnow()
        claimed = await self._claim({"_id": run_id, "status": "pending", "tries": 0}, now)
        if claimed is None:
            return False
        return await self._attempt(claimed, install, now)

    async def retry_due(self, now: datetime | None = None) -> int:
        """Send the pending deliveries whose time has come (the job runner); how many delivered."""
        now = now or utcnow()
        due = (
            await self.store[COLLECTION]
            .find({"status": "pending", "nextAttemptAt": {"$lte": now}})
            .sort("nextAttemptAt", 1)
            .to_list(RETRY_BATCH)
        )
        delivered = 0
        for doc in due:
            claimed = await self._claim(
                {"_id": doc["_id"], "status": "pending", "nextAttemptAt": doc["nextAttemptAt"]}, now
            )
            if claimed is None:
                continue  # another process took this attempt
            if int(claimed.get("tries") or 0) >= self.max_attempts:
                # The first try was made where the bound was not known (the run's actor).
                await self.store[COLLECTION].update_one(
                    {"_id": claimed["_id"], "lease": claimed.get("lease")},
                    {
                        "$set": {"status": "failed"},
                        "$unset": {"nextAttemptAt": "", "leasedUntil": "", "lease": ""},
                    },
                )
                continue
            install = await find_install(self.store, claimed["installId"], "callbackSecretEncrypted")
            if await self._attempt(claimed, install or {"_id": claimed["installId"]}, now):
                delivered += 1
        return delivered

    async def redeliver(self, install: Document, run_id: str, now: datetime | None = None) -> dict[str, Any]:
        """Send the run's callback again now, starting a fresh delivery (404 when the run has none,
        409 while an attempt is being sent)."""
        now = now or utcnow()
        found = await self.store[COLLECTION].find_one(
            {"_id": run_id, "installId": install["_id"]}, {"_id": 1}
        )
        if found is None:
            raise NotFound("This run has no callback")
        claimed = await self._claim(
            {"_id": run_id, "installId": install["_id"]},
            now,
            {"status": "pending", "tries": 0, "windowStart": now},
        )
        if claimed is None:
            raise Conflict("A delivery attempt of this callback is in progress; try again shortly")
        await self._attempt(claimed, install, now)
        latest = await self.store[COLLECTION].find_one({"_id": run_id})
        assert latest is not None
        return view(latest)

    async def record(self, run_id: str) -> dict[str, Any] | None:
        """The delivery record of a run (None when it has no callback)."""
        doc = await self.store[COLLECTION].find_one({"_id": run_id})
        return view(doc) if doc is not None else None

    async def _claim(self, query: Document, now: datetime, fields: Document | None = None) -> Document | None:
        """Take one attempt of the delivery `query` names (by `_id`), setting `fields` too: a lease
        with a token of its own, which the attempt's final update names, so an attempt whose lease
        expired (and was taken over) cannot overwrite the outcome of the attempt that took it over.
        The delivery as leased, or None when another attempt holds it. One conditional
        `update_one`, which alone decides who wins, then a read of what it won:
        `find_one_and_update` read every delivery ever stored on the embedded server (116 ms at
        5,000, on every run's callback)."""
        lease = new_id()
        free = {"leasedUntil": {"$not": {"$gt": now}}}  # never leased, or its lease ran out
        change = {**(fields or {}), "nextAttemptAt": now + LEASE, "leasedUntil": now + LEASE, "lease": lease}
        taken = await self.store[COLLECTION].update_one({**query, **free}, {"$set": change})
        if not taken.modified_count:
            return None
        return await self.store[COLLECTION].find_one({"_id": query["_id"], "lease": lease})

    async def _attempt(self, doc: Document, install: Document, now: datetime) -> bool:
        """One signed POST; the record says what happened. True when delivered."""
        tries = int(doc.get("tries") or 0) + 1
        window_start = doc.get("windowStart") or doc.get("createdAt") or now
        started = time.monotonic()
        with tracing.attached(doc.get("trace")):  # in the run's trace, whichever process sends (#33)
            status_code, error, final = await self._send(doc["url"], doc["body"].encode(), install)
        latency_ms = int((time.monotonic() - started) * 1000)
        attempt = {"at": now, "status": status_code, "latencyMs": latency_ms, "error": error}
        delivered = status_code is not None and 200 <= status_code < 300
        update: Document = {"tries": tries}
        unset: Document = {"leasedUntil": ""}
        if delivered:
            update["status"] = "delivered"
            update["deliveredAt"] = now
            unset["nextAttemptAt"] = ""
        else:
            wait = backoff(tries)
            over = tries >= self.max_attempts or (now + wait) - aware(window_start) > HORIZON
            if final or over:
                update["status"] = "failed"
                unset["nextAttemptAt"] = ""
            else:
                update["nextAttemptAt"] = now + wait
        unset["lease"] = ""
        await self.store[COLLECTION].update_one(
            {"_id": doc["_id"], "lease": doc.get("lease")},
            {
                "$set": update,
                "$unset": unset,
                "$push": {"attempts": {"$each": [attempt], "$slice": -KEPT_ATTEMPTS}},
            },
        )
        if not delivered:
            log.warning(
                "callback attempt %s failed: %s",
                tries,
                error or f"HTTP {status_code}",
                extra={"installId": doc["installId"], "runId": doc["_id"]},
            )
        return delivered

    async def _send(self, url: str, body: bytes, install: Document) -> tuple[int | None, str | None, bool]:
        """(HTTP status, error, whether the failure is final). Signed with the install's callback
        secret when it has one; an install without one gets unsigned callbacks."""
        stored = install.get("callbackSecretEncrypted")
        secret = self.vault.decrypt(stored) if stored else None
        headers = {"Content-Type": "application/json"}
        if secret is not None:
            headers[SIGNATURE_HEADER] = sign(body, secret)
        try:
            async with egress_client(self.allow_private, timeout=SEND_TIMEOUT_S) as client:
                response = await client.post(url, content=body, headers=headers)
        except EgressDenied as exc:
            return (None, f"Refused by the egress guard: {exc.reason}", True)
        except (httpx.InvalidURL, ValueError):
            return (None, "The callback URL is not usable", True)
        except httpx.HTTPError as exc:
            return (None, type(exc).__name__, False)
        code = response.status_code
        if code < 300:
            return (code, None, False)
        # 5xx, 408 and 429 are worth another try; any other answer is the receiver's final word.
        final = code < 500 and code not in (408, 429)
        return (code, f"HTTP {code}", final)
