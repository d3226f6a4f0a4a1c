"""Charging deployers: `Charges`, the one entry point of the money paths: the charge-cycle route,
provider events, and the paths it builds on the charge itself (`Charger`, period_charge.py).

Cancel billing (cancellation.py), the monthly cycle (cycle.py) and the builder's side
(earnings.py: held payouts, transfers, my-earnings) live beside it; `Charges` builds them and
calls them.

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

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import Field, StrictInt

from svc.billing.cancellation import CancelBilling
from svc.billing.cycle import MonthlyCycle
from svc.billing.earnings import Earnings
from svc.billing.payments import (
    PaymentProvider,
)
from svc.billing.period_charge import Charger
from svc.billing.usage import MIN_CHARGE_CENTS, billed_until, check_period
from svc.core import (
    BadRequest,
    Conflict,
    Document,
    Forbidden,
    Mailer,
    NotFound,
    RequestBody,
    Store,
    Timestamp,
    count_metric,
    utcnow,
)
from svc.identity import Principal
from svc.installs import Installs, find_install
from svc.templates import find_template

log = logging.getLogger(__name__)

# A periodEnd of "now" on the caller's side may be a moment ahead of ours; more would let
# runs recorded after the charge fall inside an already billed period.
CLOCK_SKEW = timedelta(seconds=1)


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


class Charges:
    """Invoices and the calls that move money."""

    def __init__(
        self, store: Store, mailer: Mailer, provider: PaymentProvider | None, installs: Installs
    ) -> None:
        self.store = store
        self.provider = provider
        # The charge of one period (period_charge.py), and the money paths built on it, one module
        # each: Charges calls them (the public methods below delegate), never the reverse.
        self.charger = Charger(store, mailer, provider, installs)
        self.cancellation = CancelBilling(self.charger)
        self.cycle = MonthlyCycle(self.charger)
        self.builders = Earnings(self.charger)
        self.charge = self.charger.charge
        self.require_provider = self.charger.require_provider

    @property
    def _invoices(self) -> Any:
        return self.store["invoices"]

    # ---- the other money paths (svc/billing/cancellation.py, cycle.py, earnings.py) ------------

    async def billed_until(self, install: Document) -> datetime:
        """Where the install's unbilled period starts (svc/billing/usage.py)."""
        return await billed_until(self.store, install)

    async def cancel_install(self, user_id: str, install_id: str) -> Document:
        """PATCH /api/stripe/installs/:id/cancel (CancelBilling.cancel_install)."""
        return await self.cancellation.cancel_install(user_id, install_id)

    async def run_cycle(
        self, cycle_end: datetime, now: datetime, renew: Callable[[], Awaitable[None]] | None = None
    ) -> dict[str, int]:
        """The monthly charge of every active paid install (MonthlyCycle.run_cycle)."""
        return await self.cycle.run_cycle(cycle_end, now, renew)

    async def pay_out_held(self, builder_user_id: str | None = None) -> int:
        """Transfer held builder shares (Earnings.pay_out_held); how many moved."""
        return await self.builders.pay_out_held(builder_user_id)

    async def earnings(self, user_id: str) -> Document:
        """GET /api/stripe/my-earnings (Earnings.earnings)."""
        return await self.builders.earnings(user_id)

    # ---- POST /api/stripe/charge-cycle -------------------------------------------------

    async def charge_cycle(self, principal: Principal, body: ChargeCycleBody) -> Document:
        """Charge an install for a period once; a second call answers `already_paid`."""
        self.require_provider()
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
        install = await find_install(self.store, body.installId)
        if install is None or install.get("status") == "pending":
            raise NotFound("Install not found")
        template = await find_template(self.store, install["templateId"], "pricingModel")
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
        settled = await self._invoices.update_one(
            {"_id": invoice_id, "attempt": int(str(attempt)), "status": {"$in": ["processing", "failed"]}},
            {"$set": {**update, "updatedAt": utcnow()}},
        )
        if not succeeded and settled.modified_count:
            await count_metric(self.store, "payment_failures", {"reason": "provider_event"})
