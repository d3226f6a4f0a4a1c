"""Charging deployers: invoices, charge-cycle, cancel billing, earnings and the monthly cycle.

An invoice is the record of one install's charge for one period, unique on
(installId, periodStart, periodEnd). It is written *before* the provider is called
(`processing`), and the provider's idempotency key is derived from the invoice's
install, period and attempt, so:

- two racing calls for one period create one invoice; the loser waits for the winner
  and answers `already_paid`;
- a process that dies while the provider charges leaves a `processing` invoice; once
  its claim is older than CLAIM_LEASE, the next caller (or the monthly job) takes it
  over and repeats the call with the same key, which the provider answers with the
  first payment instead of charging again;
- a declined card marks the invoice `failed`; a later call retries with attempt + 1.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import Field, StrictInt
from pymongo import DESCENDING, ReturnDocument
from pymongo.errors import DuplicateKeyError

from svc.billing.payments import (
    PaymentDeclined,
    PaymentPending,
    PaymentProvider,
    ProviderError,
    ProviderRefused,
    unavailable,
)
from svc.billing.usage import MIN_CHARGE_CENTS, check_period, install_amount, money, split_fee
from svc.core import (
    BadGateway,
    BadRequest,
    Conflict,
    Document,
    Forbidden,
    Mailer,
    NotFound,
    PaymentRequired,
    RequestBody,
    Store,
    Timestamp,
    Unavailable,
    aware,
    iso,
    tokens,
    utcnow,
)
from svc.identity import Principal
from svc.installs import is_visible

log = logging.getLogger(__name__)

CLAIM_LEASE = timedelta(minutes=5)
# A periodEnd of "now" on the caller's side may be a moment ahead of ours; more would let
# runs recorded after the charge fall inside an already billed period.
CLOCK_SKEW = timedelta(seconds=1)
# The provider keeps idempotency keys for 24 hours: past that, resuming could charge again.
KEY_LIFETIME = timedelta(hours=23)
# How far back the monthly job looks for installs deleted without cancel billing.
UNBILLED_CANCEL = timedelta(days=400)
RACE_WAIT_S = 10.0
RACE_POLL_S = 0.1
BATCH = 200


class ChargeCycleBody(RequestBody):
    """POST /api/stripe/charge-cycle."""

    installId: str = Field(min_length=1, max_length=64)
    amountCents: StrictInt = Field(ge=MIN_CHARGE_CENTS, le=99_999_999)
    periodStart: Timestamp | None = None
    periodEnd: Timestamp | None = None


def previous_month(now: datetime) -> tuple[datetime, datetime]:
    """[first of last month, first of this month) in UTC."""
    end = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    start = (end - timedelta(days=1)).replace(day=1)
    return start, end


@dataclass(frozen=True)
class ChargeOutcome:
    """What a charge request came to."""

    invoice: Document
    charged_now: bool  # False: the period was paid before this call


class Charges:
    """Invoices and the calls that move money."""

    def __init__(self, store: Store, mailer: Mailer, provider: PaymentProvider | None) -> None:
        self.store = store
        self.mailer = mailer
        self.provider = provider

    @property
    def _invoices(self) -> Any:
        return self.store["invoices"]

    def _require_provider(self) -> PaymentProvider:
        if self.provider is None:
            raise unavailable()
        return self.provider

    # ---- POST /api/stripe/charge-cycle -------------------------------------------------

    async def charge_cycle(self, principal: Principal, body: ChargeCycleBody) -> Document:
        """Charge an install for a period once; a second call answers `already_paid`."""
        self._require_provider()
        if principal.install_id is not None and principal.install_id != body.installId:
            raise Forbidden(f"This key is scoped to install {principal.install_id}")
        if (body.periodStart is None) != (body.periodEnd is None):
            raise BadRequest("periodStart and periodEnd go together: send both or neither")
        if body.periodStart is not None and body.periodEnd is not None:
            start, end = body.periodStart, body.periodEnd  # Timestamp: already UTC
        else:
            start, end = previous_month(utcnow())
        check_period(start, end)
        if end > utcnow() + CLOCK_SKEW:
            raise BadRequest("periodEnd must not be in the future")
        install = await self.store.installs.find_one({"_id": body.installId})
        if install is None or install.get("status") == "pending":
            raise NotFound("Install not found")
        template = await self.store["templates"].find_one({"_id": install["templateId"]}, {"pricingModel": 1})
        if (template or {}).get("pricingModel", "free") == "free":
            raise Conflict("The install's template is free; there is nothing to charge")
        outcome = await self.charge(install, start, end, body.amountCents, "charge_cycle", wait=True)
        invoice = outcome.invoice
        if not outcome.charged_now:
            return {"status": "already_paid", "invoiceId": invoice["_id"]}
        return {
            "invoiceId": invoice["_id"],
            "paymentIntentId": invoice["paymentIntentId"],
            "status": "succeeded",
            "amountCents": invoice["amountCents"],
        }

    # ---- the charge itself ---------------------------------------------------------------

    async def charge(
        self,
        install: Document,
        start: datetime,
        end: datetime,
        amount: int,
        source: str,
        *,
        wait: bool,
        now: datetime | None = None,
    ) -> ChargeOutcome:
        """Claim the period's invoice, charge through the provider, record the outcome."""
        provider = self._require_provider()
        if not install.get("payCustomerId") or not install.get("payPaymentMethodId"):
            raise Conflict("The install has no saved payment method (payCustomerId and payPaymentMethodId)")
        now = max(now or utcnow(), utcnow())
        invoice = await self._claim(install, start, end, amount, source, now, wait)
        if invoice["status"] == "paid":
            return ChargeOutcome(invoice, charged_now=False)
        try:
            charge = await provider.charge(
                amount_cents=invoice["amountCents"],
                customer_id=install["payCustomerId"],
                payment_method_id=install["payPaymentMethodId"],
                fee_cents=invoice["feeCents"],
                destination=invoice.get("payoutAccountId"),
                idempotency_key=f"svc-charge:{invoice['installId']}:{iso(start)}:{iso(end)}:{invoice['attempt']}",
                metadata={
                    "invoiceId": invoice["_id"],
                    "installId": install["_id"],
                    "attempt": str(invoice["attempt"]),
                },
                description=f"{install['templateName']} usage {iso(start)} to {iso(end)}",
            )
        except PaymentDeclined as exc:
            await self._attempt_failed(invoice, exc.message, exc.code)
            raise PaymentRequired(
                f"The payment was declined: {exc.message}", code="payment_declined"
            ) from None
        except ProviderRefused as exc:
            # Refused before anything moved: the claim is released at once and the period stays
            # billable; the next call retries with attempt + 1 (a new key).
            await self._attempt_failed(invoice, str(exc), exc.code)
            if exc.busy:
                raise Unavailable(f"{exc}; try again shortly") from None
            raise BadGateway(str(exc)) from None
        except ProviderError as exc:
            # Unknown outcome: the invoice stays `processing` and is resumed with the same key.
            raise BadGateway(str(exc)) from None
        except PaymentPending as exc:
            # Accepted but not settled (a slow payment method): the provider's event settles it.
            await self._invoices.update_one(
                {"_id": invoice["_id"]},
                {"$set": {"paymentIntentId": exc.payment_intent_id, "updatedAt": utcnow()}},
            )
            raise Conflict(
                "The payment is processing; the invoice is settled when the provider confirms it"
            ) from None
        paid = await self._invoices.find_one_and_update(
            {"_id": invoice["_id"]},
            {
                "$set": {
                    "status": "paid",
                    "paymentIntentId": charge.payment_intent_id,
                    "paidAt": utcnow(),
                    "updatedAt": utcnow(),
                },
                "$unset": {"failure": ""},
            },
            return_document=ReturnDocument.AFTER,
        )
        assert paid is not None
        log.info("install charged", extra={"installId": install["_id"], "amountCents": paid["amountCents"]})
        return ChargeOutcome(paid, charged_now=True)

    async def _attempt_failed(self, invoice: Document, failure: str, code: str | None) -> None:
        """Record a failed attempt on the invoice (nothing was charged) and end its claim."""
        await self._invoices.update_one(
            {"_id": invoice["_id"], "claim": invoice["claim"]},
            {
                "$set": {"status": "failed", "failure": failure, "updatedAt": utcnow()},
                "$push": {
                    "attempts": {
                        "$each": [
                            {"attempt": invoice["attempt"], "code": code, "error": failure, "at": utcnow()}
                        ],
                        "$slice": -20,
                    }
                },
            },
        )

    async def _claim(
        self,
        install: Document,
        start: datetime,
        end: datetime,
        amount: int,
        source: str,
        now: datetime,
        wait: bool,
    ) -> Document:
        """The period's invoice, claimed by this call, or already paid."""
        claim = tokens.new_id()
        template = await self.store["templates"].find_one({"_id": install["templateId"]}) or {}
        builder_user, account = await self._payee(template)
        fee, builder = split_fee(amount)
        doc: Document = {
            "_id": f"inv_{tokens.new_id()}",
            "installId": install["_id"],
            "templateId": install["templateId"],
            "builderUserId": builder_user,
            "payoutAccountId": account,
            # The builder's share goes to their payout account, or stays on the platform balance.
            "payout": "routed" if account else "held",
            "deployer": install.get("owner"),
            "periodStart": start,
            "periodEnd": end,
            "amountCents": amount,
            "feeCents": fee,
            "builderAmountCents": builder,
            "status": "processing",
            "attempt": 1,
            "claim": claim,
            "claimedAt": now,
            # When this attempt's idempotency key was first used: it must not be reused a day on.
            "attemptStartedAt": now,
            "source": source,
            "createdAt": utcnow(),
            "updatedAt": utcnow(),
        }
        try:
            await self._invoices.insert_one(doc)
        except DuplicateKeyError:
            pass
        else:
            await self._refuse_overlap(doc)
            return doc
        key = {"installId": install["_id"], "periodStart": start, "periodEnd": end}
        deadline = asyncio.get_running_loop().time() + (RACE_WAIT_S if wait else 0)
        while True:
            existing = await self._invoices.find_one(key)
            if existing is None:  # removed under us: try again from the start
                return await self._claim(install, start, end, amount, source, now, wait)
            if existing["status"] == "paid":
                return existing
            claimed_at = aware(existing["claimedAt"])
            started = aware(existing.get("attemptStartedAt") or existing["claimedAt"])
            if existing["status"] == "processing" and started + KEY_LIFETIME <= now:
                raise Conflict(
                    f"Invoice {existing['_id']} has had an unknown outcome for over a day; "
                    "an operator must check it with the payment provider"
                )
            stale = claimed_at + CLAIM_LEASE <= now
            if existing["status"] == "failed" or stale:
                update: Document = {"claim": claim, "claimedAt": now, "updatedAt": utcnow()}
                if existing["status"] == "failed":
                    # A retry bills the same period: refused if another invoice billed part of it since.
                    await self._refuse_overlap(existing, remove=False)
                    update.update(
                        status="processing",
                        attempt=existing["attempt"] + 1,
                        attemptStartedAt=now,
                        amountCents=amount,
                        feeCents=fee,
                        builderAmountCents=builder,
                    )
                taken = await self._invoices.find_one_and_update(
                    {"_id": existing["_id"], "claim": existing["claim"], "status": existing["status"]},
                    {"$set": update},
                    return_document=ReturnDocument.AFTER,
                )
                if taken is not None:
                    return taken
                continue
            if asyncio.get_running_loop().time() >= deadline:
                raise Conflict("A charge for this install and period is in progress; try again shortly")
            await asyncio.sleep(RACE_POLL_S)

    async def _refuse_overlap(self, invoice: Document, remove: bool = True) -> None:
        """409 when another paid or pending invoice of the install covers part of this period:
        the same usage is never billed twice. Racing overlaps may both be refused (never both
        charged). `remove` deletes this call's fresh invoice on refusal."""
        other = await self._invoices.find_one(
            {
                "installId": invoice["installId"],
                "_id": {"$ne": invoice["_id"]},
                "status": {"$in": ["paid", "processing"]},
                "periodStart": {"$lt": invoice["periodEnd"]},
                "periodEnd": {"$gt": invoice["periodStart"]},
            }
        )
        if other is None:
            return
        if remove:
            await self._invoices.delete_one({"_id": invoice["_id"], "claim": invoice["claim"]})
        raise Conflict(
            f"The period overlaps invoice {other['_id']} ({iso(other['periodStart'])} to "
            f"{iso(other['periodEnd'])}), which already bills this usage",
            invoiceId=other["_id"],
        )

    async def _payee(self, template: Document) -> tuple[str | None, str | None]:
        """The builder paid for this template, and their payout account when it is active.

        A template owned by an org pays the org's owner. Without an active payout
        account the builder's share is held on the platform balance (docs/billing.md).
        """
        owner = template.get("owner") or {}
        user_id = owner.get("id") if owner.get("kind") == "user" else None
        if owner.get("kind") == "org":
            org = await self.store.orgs.find_one({"_id": owner["id"]}, {"ownerId": 1})
            user_id = (org or {}).get("ownerId")
        if user_id is None:
            return None, None
        user = await self.store.users.find_one({"_id": user_id}, {"payout": 1})
        payout = (user or {}).get("payout") or {}
        return user_id, payout.get("accountId") if payout.get("status") == "active" else None

    # ---- PATCH /api/stripe/installs/:id/cancel -------------------------------------------

    async def cancel_install(
        self, user_id: str, install_id: str, retire: Callable[[Document], Awaitable[None]]
    ) -> Document:
        """Bill completed runs since the last paid period, mail a receipt, cancel the install."""
        self._require_provider()
        mine = {
            "_id": install_id,
            "$or": [{"deployedBy": user_id}, {"owner": {"kind": "user", "id": user_id}}],
        }
        install = await self.store.installs.find_one(mine)
        if install is not None and install["owner"].get("kind") == "org":
            # An org install: its deployer, while still a member of the org.
            member = {"orgId": install["owner"]["id"], "userId": user_id}
            if await self.store.org_members.find_one(member, {"_id": 1}) is None:
                install = None
        if install is None or not is_visible(install):
            raise NotFound("Install not found")
        if install["status"] == "cancelled":
            raise Conflict("Install is already cancelled")
        # Claim the cancellation, so a double click (or two tabs) bills and mails once.
        now = utcnow()
        claimed = await self.store.installs.find_one_and_update(
            {
                "$and": [
                    mine,
                    {"status": install["status"]},
                    {
                        "$or": [
                            {"cancellingAt": {"$exists": False}},
                            {"cancellingAt": {"$lt": now - CLAIM_LEASE}},
                        ]
                    },
                ]
            },
            {"$set": {"cancellingAt": now}},
        )
        if claimed is None:
            raise Conflict("A cancellation of this install is already in progress")
        template = await self.store["templates"].find_one({"_id": install["templateId"]}) or {}
        since = await self.billed_until(install)
        amount = (
            await install_amount(self.store, install_id, template, since, now)
            if template.get("pricingModel", "free") != "free"
            else 0
        )
        charged, note = False, "No charge: the amount since the last invoice is under $0.50."
        if amount >= MIN_CHARGE_CENTS:
            if not install.get("payCustomerId") or not install.get("payPaymentMethodId"):
                note = f"{money(amount)} is due; no payment method is saved on this install."
            else:
                try:
                    await self.charge(install, since, now, amount, "cancel", wait=True, now=now)
                    charged, note = True, f"Charged {money(amount)} to the saved payment method."
                except (PaymentRequired, BadGateway, Conflict, Unavailable) as exc:
                    note = f"{money(amount)} is due; the charge did not go through ({exc.message})."
        await retire(install)
        await self._receipt(install, user_id, since, now, amount if charged else 0, note)
        return {"status": "cancelled", "charged": charged, "amountCents": amount if charged else 0}

    async def billed_until(self, install: Document) -> datetime:
        """The end of the install's last paid (or still settling) invoice, or its creation."""
        last = await self._invoices.find_one(
            {"installId": install["_id"], "status": {"$in": ["paid", "processing"]}},
            sort=[("periodEnd", DESCENDING)],
        )
        return aware(last["periodEnd"]) if last else aware(install["createdAt"])

    async def _receipt(
        self, install: Document, user_id: str, since: datetime, until: datetime, amount: int, note: str
    ) -> None:
        user = await self.store.users.find_one({"_id": user_id}, {"email": 1})
        to = install.get("deployerEmail") or (user or {}).get("email")
        if not to:
            return
        body = (
            f"Your install of {install['templateName']} ({install['_id']}) is cancelled.\n\n"
            f"Usage period: {iso(since)} to {iso(until)}\n"
            f"Amount charged: {money(amount)}\n{note}\n"
        )
        await self.mailer.send(to, f"Receipt: {install['templateName']} cancelled", body, "cancel_receipt")

    # ---- the monthly cycle -------------------------------------------------------------------

    async def run_cycle(
        self, cycle_end: datetime, now: datetime, renew: Callable[[], Awaitable[None]] | None = None
    ) -> dict[str, int]:
        """Charge every active paid install with a saved payment method up to `cycle_end`.

        Each install's period starts where its last paid invoice ended, so a rerun after a
        crash finds the same periods (and their invoices) and charges nobody twice; an
        amount under 50 cents is carried into the next cycle.
        """
        self._require_provider()
        paid_templates = {
            doc["_id"]: doc
            async for doc in self.store["templates"].find(
                {"kind": "template", "pricingModel": {"$in": ["per_run", "per_k_tokens"]}},
                {"pricingModel": 1, "priceUsdCents": 1, "owner": 1},
            )
        }
        counts = {"charged": 0, "alreadyPaid": 0, "skipped": 0, "failed": 0, "resumed": 0}
        await self._resume_stale(now, counts)
        query = {
            # Installs removed with DELETE (not through cancel billing) still owe their last usage.
            "$or": [
                {"status": "completed"},
                {"status": "cancelled", "cancelledAt": {"$gt": cycle_end - UNBILLED_CANCEL}},
            ],
            "templateId": {"$in": list(paid_templates)},
            "payCustomerId": {"$type": "string"},
            "payPaymentMethodId": {"$type": "string"},
        }
        async for install in self.store.installs.find(query).sort("_id", 1).batch_size(BATCH):
            end = cycle_end
            if install["status"] == "cancelled":
                end = min(cycle_end, aware(install["cancelledAt"]))
            since = await self.billed_until(install)
            if since >= end:
                counts["alreadyPaid"] += 1
                continue
            template = paid_templates[install["templateId"]]
            amount = await install_amount(self.store, install["_id"], template, since, end)
            if amount < MIN_CHARGE_CENTS:
                counts["skipped"] += 1
                continue
            try:
                outcome = await self.charge(install, since, end, amount, "monthly", wait=False, now=now)
                counts["charged" if outcome.charged_now else "alreadyPaid"] += 1
            except (PaymentRequired, BadGateway, Conflict, Unavailable) as exc:
                counts["failed"] += 1
                log.warning(
                    "monthly charge failed", extra={"installId": install["_id"], "reason": exc.message}
                )
            if renew is not None:
                await renew()
        log.info("billing cycle done", extra={"cycleEnd": iso(cycle_end), **counts})
        return counts

    async def _resume_stale(self, now: datetime, counts: dict[str, int]) -> None:
        """Finish charges left `processing` by a process that died (their lease has run out)."""
        stale = {
            "status": "processing",
            "claimedAt": {"$lt": now - CLAIM_LEASE},
            "attemptStartedAt": {"$gt": now - KEY_LIFETIME},
        }
        async for invoice in self._invoices.find(stale).limit(BATCH):
            install = await self.store.installs.find_one({"_id": invoice["installId"]})
            if install is None:
                continue
            try:
                await self.charge(
                    install,
                    aware(invoice["periodStart"]),
                    aware(invoice["periodEnd"]),
                    invoice["amountCents"],
                    invoice["source"],
                    wait=False,
                    now=now,
                )
                counts["resumed"] += 1
            except (PaymentRequired, BadGateway, Conflict, Unavailable) as exc:
                counts["failed"] += 1
                log.warning(
                    "resuming a charge failed", extra={"invoiceId": invoice["_id"], "reason": exc.message}
                )

    async def pay_out_held(self, builder_user_id: str | None = None) -> int:
        """Transfer builder shares held while a payout account was not active; how many moved.

        One transfer per invoice with the key `svc-payout:<invoiceId>`, claimed by a
        conditional update (held → transferring → routed). An unknown outcome stays
        `transferring` and is retried with the same key after the lease, within the
        provider's 24-hour key lifetime; older ones are left for an operator.
        """
        provider = self._require_provider()
        now = utcnow()
        due: Document = {
            "status": "paid",
            "builderAmountCents": {"$gt": 0},
            "$or": [
                {"payout": "held"},
                {
                    "payout": "transferring",
                    "transferClaimedAt": {"$lt": now - CLAIM_LEASE},
                    "transferStartedAt": {"$gt": now - KEY_LIFETIME},
                },
            ],
        }
        builders = (
            [builder_user_id] if builder_user_id else await self._invoices.distinct("builderUserId", due)
        )
        active = {
            user["_id"]: user["payout"]["accountId"]
            async for user in self.store.users.find(
                {"_id": {"$in": [b for b in builders if b]}, "payout.status": "active"}, {"payout": 1}
            )
        }
        moved = 0
        for user_id, account_id in active.items():
            async for invoice in self._invoices.find({**due, "builderUserId": user_id}).limit(BATCH):
                claimed = await self._invoices.find_one_and_update(
                    {
                        "_id": invoice["_id"],
                        "payout": invoice["payout"],
                        "transferClaimedAt": invoice.get("transferClaimedAt"),
                    },
                    {
                        "$set": {
                            "payout": "transferring",
                            "transferClaimedAt": now,
                            "transferStartedAt": invoice.get("transferStartedAt") or now,
                        }
                    },
                )
                if claimed is None:
                    continue
                try:
                    transfer_id = await provider.transfer(
                        amount_cents=invoice["builderAmountCents"],
                        destination=account_id,
                        idempotency_key=f"svc-payout:{invoice['_id']}",
                        metadata={"invoiceId": invoice["_id"]},
                    )
                except (ProviderError, PaymentDeclined):
                    log.warning("held payout transfer failed", extra={"invoiceId": invoice["_id"]})
                    continue  # stays `transferring`: retried with the same key after the lease
                await self._invoices.update_one(
                    {"_id": invoice["_id"]},
                    {"$set": {"payout": "routed", "transferId": transfer_id, "payoutAccountId": account_id}},
                )
                moved += 1
        return moved

    # ---- GET /api/stripe/my-earnings ---------------------------------------------------------

    async def earnings(self, user_id: str) -> Document:
        """Paid invoices of the builder's templates, by template (one aggregation)."""
        self._require_provider()
        pipeline = [
            {"$match": {"builderUserId": user_id, "status": "paid"}},
            {"$sort": {"periodStart": -1}},
            {
                "$group": {
                    "_id": "$templateId",
                    "paidCount": {"$sum": 1},
                    "builderAmountCents": {"$sum": "$builderAmountCents"},
                    "lastPaidAt": {"$first": "$periodStart"},
                }
            },
            {"$sort": {"lastPaidAt": -1}},
        ]
        rows = [row async for row in await self._invoices.aggregate(pipeline)]
        templates = {
            doc["_id"]: doc
            async for doc in self.store["templates"].find(
                {"_id": {"$in": [row["_id"] for row in rows]}}, {"name": 1, "slug": 1}
            )
        }
        by_template = [
            {
                "templateId": row["_id"],
                "name": templates.get(row["_id"], {}).get("name"),
                "slug": templates.get(row["_id"], {}).get("slug"),
                "paidCount": row["paidCount"],
                "builderAmountCents": row["builderAmountCents"],
                "lastPaidAt": iso(row["lastPaidAt"]),
            }
            for row in rows
        ]
        return {
            "totalBuilderAmountCents": sum(row["builderAmountCents"] for row in by_template),
            "byTemplate": by_template,
        }

    # ---- provider events -----------------------------------------------------------------------

    async def payment_settled(self, intent: Document, succeeded: bool) -> None:
        """A payment intent event: settle the invoice a crashed call left `processing`."""
        metadata = intent.get("metadata") or {}
        invoice_id, attempt = metadata.get("invoiceId"), metadata.get("attempt")
        if not invoice_id or not str(attempt or "").isdigit():
            return
        update: Document = (
            {"status": "paid", "paymentIntentId": intent.get("id"), "paidAt": utcnow()}
            if succeeded
            else {"status": "failed", "failure": "payment failed (provider event)"}
        )
        await self._invoices.update_one(
            {"_id": invoice_id, "attempt": int(attempt), "status": {"$in": ["processing", "failed"]}},
            {"$set": {**update, "updatedAt": utcnow()}},
        )
