"""Cancel billing: bill the usage since the last paid period, mail a receipt, cancel the install.

`PATCH /api/stripe/installs/:id/cancel`, for the install's deployer (docs/billing.md).
"""

from __future__ import annotations

from datetime import datetime

from svc.billing.claim_timeouts import CLAIM_LEASE
from svc.billing.period_charge import Charger
from svc.billing.usage import MIN_CHARGE_CENTS, billed_until, ever_paid, install_amount, money
from svc.core import (
    BadGateway,
    Conflict,
    Document,
    NotFound,
    PaymentRequired,
    Timeline,
    Unavailable,
    actor_of,
    iso,
    utcnow,
)
from svc.identity import user_email
from svc.installs import deployer_reaches, find_install
from svc.templates import find_template


class CancelBilling:
    """The deployer's cancel: one claim, one charge at most, one receipt."""

    def __init__(self, charger: Charger) -> None:
        self.charger = charger
        self.store = charger.store
        self.mailer = charger.mailer
        self.installs = charger.installs

    async def cancel_install(self, user_id: str, install_id: str) -> Document:
        """Bill completed runs since the last paid period, mail a receipt, cancel the install."""
        self.charger.require_provider()
        install = await find_install(self.store, install_id)
        # The install's deployer (for an org's install, while still a member): svc.installs.reach.
        if install is None or not await deployer_reaches(self.installs.orgs, user_id, install):
            raise NotFound("Install not found")
        if install["status"] == "cancelled":
            raise Conflict("Install is already cancelled")
        # Claim the cancellation, so a double click (or two tabs) bills and mails once.
        now = utcnow()
        if not await self.installs.claim_cancellation(install, now, CLAIM_LEASE):
            raise Conflict("A cancellation of this install is already in progress")
        template = await find_template(self.store, install["templateId"]) or {}
        since = await billed_until(self.store, install)
        amount = (
            await install_amount(self.store, install_id, template, since, now) if ever_paid(template) else 0
        )
        charged, note = False, "No charge: the amount since the last invoice is under $0.50."
        if amount >= MIN_CHARGE_CENTS:
            if not install.get("payCustomerId") or not install.get("payPaymentMethodId"):
                note = f"{money(amount)} is due; no payment method is saved on this install."
            else:
                try:
                    await self.charger.charge(install, since, now, amount, "cancel", wait=True, now=now)
                    charged, note = True, f"Charged {money(amount)} to the saved payment method."
                except (PaymentRequired, BadGateway, Conflict, Unavailable) as exc:
                    note = f"{money(amount)} is due; the charge did not go through ({exc.message})."
        await self.installs.retire(install)
        await self._receipt(install, user_id, since, now, amount if charged else 0, note)
        meta = {"charged": charged, "amountCents": amount if charged else 0, "dueCents": amount}
        actor = actor_of(user_id, "session")
        await Timeline(self.store).record(
            "billing", "billing.cancelled", install_id=install_id, actor=actor, meta=meta
        )
        return {"status": "cancelled", "charged": charged, "amountCents": amount if charged else 0}

    async def _receipt(
        self, install: Document, user_id: str, since: datetime, until: datetime, amount: int, note: str
    ) -> None:
        to = install.get("deployerEmail") or await user_email(self.store, user_id)
        if not to:
            return
        body = (
            f"Your install of {install['templateName']} ({install['_id']}) is cancelled.\n\n"
            f"Usage period: {iso(since)} to {iso(until)}\n"
            f"Amount charged: {money(amount)}\n{note}\n"
        )
        await self.mailer.send(to, f"Receipt: {install['templateName']} cancelled", body, "cancel_receipt")
