"""The monthly cycle: charge every active paid install up to the cycle's end, once.

Driven by `svc/jobs.py` (the scheduler's billing job); a rerun after a crash finds the same
periods and invoices, so nobody is charged twice (docs/billing.md).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from svc.billing.claim_timeouts import BATCH, CLAIM_LEASE, KEY_LIFETIME, UNBILLED_CANCEL
from svc.billing.period_charge import Charger
from svc.billing.usage import MIN_CHARGE_CENTS, PAID_MODELS, billed_until, install_amount
from svc.core import BadGateway, Conflict, PaymentRequired, Unavailable, aware, iso
from svc.installs import billable_installs, find_install
from svc.templates import paid_templates

log = logging.getLogger("svc.billing.charges")


class MonthlyCycle:
    """The billing job's charges, and the resumption of charges a dead process left."""

    def __init__(self, charger: Charger) -> None:
        self.charger = charger
        self.store = charger.store

    @property
    def _invoices(self) -> Any:
        return self.store["invoices"]

    async def run_cycle(
        self, cycle_end: datetime, now: datetime, renew: Callable[[], Awaitable[None]] | None = None
    ) -> dict[str, int]:
        """Charge every active paid install with a saved payment method up to `cycle_end`.

        Each install's period starts where its last paid invoice ended, so a rerun after a
        crash finds the same periods (and their invoices) and charges nobody twice; an
        amount under 50 cents is carried into the next cycle.
        """
        self.charger.require_provider()
        # Paid now, or paid earlier in a period not billed yet (a change to free waits).
        paid = await paid_templates(self.store, PAID_MODELS)
        counts = {"charged": 0, "alreadyPaid": 0, "skipped": 0, "failed": 0, "resumed": 0}
        await self._resume_stale(now, counts)
        # Installs removed with DELETE (not through cancel billing) still owe their last usage.
        async for install in billable_installs(self.store, paid, cycle_end - UNBILLED_CANCEL, BATCH):
            end = cycle_end
            if install["status"] == "cancelled":
                end = min(cycle_end, aware(install["cancelledAt"]))
            since = await billed_until(self.store, install)
            if since >= end:
                counts["alreadyPaid"] += 1
                continue
            template = paid[install["templateId"]]
            amount = await install_amount(self.store, install["_id"], template, since, end)
            if amount < MIN_CHARGE_CENTS:
                counts["skipped"] += 1
                continue
            try:
                outcome = await self.charger.charge(
                    install, since, end, amount, "monthly", wait=False, now=now
                )
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
            install = await find_install(self.store, invoice["installId"])
            if install is None:
                continue
            try:
                await self.charger.charge(
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
