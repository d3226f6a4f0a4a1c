"""The charge itself: claim one install's period's invoice, charge it through the provider,
record the outcome (the invoice's rules: svc/billing/charges.py). Cancel billing, the monthly
cycle and builders' earnings are handed a `Charger` and call it; `Charges` builds them all and
calls them, so the calls follow the imports (nothing calls back into charges.py)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError

from svc.billing.claim_timeouts import CLAIM_LEASE, KEY_LIFETIME
from svc.billing.payments import (
    PaymentDeclined,
    PaymentPending,
    PaymentProvider,
    ProviderError,
    ProviderRefused,
    unavailable,
)
from svc.billing.usage import split_fee
from svc.core import (
    BadGateway,
    Conflict,
    Document,
    Mailer,
    PaymentRequired,
    Store,
    Timeline,
    Unavailable,
    aware,
    count_metric,
    iso,
    new_id,
    utcnow,
)
from svc.identity import find_user
from svc.installs import Installs
from svc.orgs import find_org
from svc.templates import find_template

log = logging.getLogger("svc.billing.charges")

RACE_WAIT_S = 10.0
RACE_POLL_S = 0.1


@dataclass(frozen=True)
class ChargeOutcome:
    """What a charge request came to."""

    invoice: Document
    charged_now: bool  # False: the period was paid before this call


class Charger:
    """The charge of one install's period (see svc/billing/charges.py for the invoice's rules),
    and what the money paths (cancel billing, the monthly cycle, builders' earnings) build on."""

    def __init__(
        self, store: Store, mailer: Mailer, provider: PaymentProvider | None, installs: Installs
    ) -> None:
        self.store = store
        self.mailer = mailer
        self.provider = provider
        self.installs = installs

    @property
    def _invoices(self) -> Any:
        return self.store["invoices"]

    def require_provider(self) -> PaymentProvider:
        """The provider, or the 503 of every payment endpoint when none is configured."""
        if self.provider is None:
            raise unavailable()
        return self.provider

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
        provider = self.require_provider()
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
            await count_metric(self.store, "payment_failures", {"reason": "declined"})
            raise PaymentRequired(
                f"The payment was declined: {exc.message}", code="payment_declined"
            ) from None
        except ProviderRefused as exc:
            # Refused before anything moved: the claim is released at once and the period stays
            # billable; the next call retries with attempt + 1 (a new key).
            await self._attempt_failed(invoice, str(exc), exc.code)
            await count_metric(self.store, "payment_failures", {"reason": "refused"})
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
        meta = {"invoiceId": paid["_id"], "amountCents": paid["amountCents"], "source": source}
        await Timeline(self.store).record("billing", "billing.charged", install_id=install["_id"], meta=meta)
        return ChargeOutcome(paid, charged_now=True)

    async def _attempt_failed(self, invoice: Document, failure: str, code: str | None) -> None:
        """Record a failed attempt on the invoice (nothing was charged) and end its claim."""
        meta = {"invoiceId": invoice["_id"], "attempt": invoice["attempt"], "code": code, "error": failure}
        await Timeline(self.store).record(
            "billing", "billing.charge_failed", install_id=invoice["installId"], meta=meta
        )
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
        claim = new_id()
        template = await find_template(self.store, install["templateId"]) or {}
        builder_user, account = await self._payee(template)
        fee, builder = split_fee(amount)
        doc: Document = {
            "_id": f"inv_{new_id()}",
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
            org = await find_org(self.store, owner["id"], "ownerId")
            user_id = (org or {}).get("ownerId")
        if user_id is None:
            return None, None
        user = await find_user(self.store, user_id, "payout")
        payout = (user or {}).get("payout") or {}
        return user_id, payout.get("accountId") if payout.get("status") == "active" else None

