"""Spend caps: refuse a run that would start past the install's monthly cap, and warn the deployer.

The deployer sets a monthly cap in cents on an install (svc/installs/limits.py). Before any
model call of every trigger (sync, webhook, schedule, continue, retry), the runtime calls the
admission hook wired here (`SpendCaps.admit`, svc/wiring.py; the runtime cannot import billing):
when this period's spend has reached the cap, it raises `Conflict` with the cap, the amount
spent and when the period resets, and no model is called.

"Spent" is this billing period's (the calendar month, UTC) usage cost of the install, from the
billing maths (`install_amount`: completed runs priced at the price in force, read from the run
counters kept on the write path, never a scan of runs). Installs without a cap cost nothing here;
a capped one costs a template read and the counters of one month (about 3 aggregates).

The deployer is mailed once per period at 80% and once at 100% of the cap; `spend_alerts` holds
one document per install, period and threshold, whose insert is the claim to send.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pymongo.errors import DuplicateKeyError

from svc.billing.usage import amount_cents, ever_paid, install_amount, money
from svc.core import Conflict, Document, Mailer, Store, iso, utcnow
from svc.identity import user_email
from svc.installs import limits_of
from svc.templates import find_template, next_period_start, period_start, price_in_force

log = logging.getLogger(__name__)

ALERTS = "spend_alerts"
THRESHOLDS = (80, 100)


def _in_flight_cents(state: Document, in_flight: Sequence[int]) -> int:
    """What runs still going will cost if they complete at their tokens so far."""
    if not in_flight:
        return 0
    price = int(state.get("priceUsdCents") or 0)
    if state.get("pricingModel") == "per_run":
        return price * len(in_flight)
    if state.get("pricingModel") == "per_k_tokens":
        return amount_cents("per_k_tokens", price, len(in_flight), sum(in_flight))
    return 0


class SpendCaps:
    """The monthly-cap admission check and its mails."""

    def __init__(self, store: Store, mailer: Mailer) -> None:
        self.store = store
        self.mailer = mailer

    async def admit(self, install: Document, in_flight: Sequence[int] = ()) -> None:
        """Raise `Conflict` when the install's spend this period, with what its runs in flight
        will cost, has reached its monthly cap.

        `in_flight`: the tokens so far of each OTHER run of the install already admitted and still
        running (the install's actor knows them all: it runs every run of the install). Each counts
        as a completed run at its tokens so far (per run: its price; per 1K tokens: its tokens), so
        runs started together cannot all pass a cap only one fits: the overshoot is bounded by one
        model call per run (docs/billing.md, "Spend caps")."""
        cap = limits_of(install)["monthlyCapCents"]
        if cap is None:
            return
        state = await self.state(install, cap)
        if state is None:
            return  # a free template: runs cost nothing
        await self._alert(install, cap, state)
        reserved = _in_flight_cents(state, in_flight)
        if state["spentCents"] + reserved >= cap:
            raise Conflict(
                f"Monthly spend cap reached: {money(state['spentCents'])} spent of {money(cap)}; "
                f"runs start again when the period resets at {state['periodResetsAt']}",
                monthlyCapCents=cap,
                spentCents=state["spentCents"],
                periodResetsAt=state["periodResetsAt"],
            )

    async def state(self, install: Document, cap: int | None, now: datetime | None = None) -> Document | None:
        """This period's spend of the install ({spentCents, periodStart, periodResetsAt}), None when
        its template never costs anything."""
        now = now or utcnow()
        template = await find_template(
            self.store, install.get("templateId"), "pricingModel", "priceUsdCents", "priceHistory"
        )
        if template is None or not ever_paid(template):
            return None
        start = period_start(now)
        spent = await install_amount(self.store, install["_id"], template, start, now)
        model, price = price_in_force(template, now)
        return {
            "pricingModel": model,
            "priceUsdCents": price,
            "spentCents": spent,
            "periodStart": iso(start),
            "periodResetsAt": iso(next_period_start(now)),
        }

    async def limits_view(self, install: Document) -> dict[str, Any]:
        """PATCH /api/installs/:installId/limits's answer: the limits and this period's spend."""
        limits = limits_of(install)
        state = await self.state(install, limits["monthlyCapCents"])
        now = utcnow()
        return {
            "installId": install["_id"],
            **limits,
            "spentCents": state["spentCents"] if state else 0,
            "periodStart": iso(period_start(now)),
            "periodResetsAt": iso(next_period_start(now)),
        }

    async def _alert(self, install: Document, cap: int, state: Document) -> None:
        """Mail the deployer the first time this period's spend reaches 80% and 100% of the cap."""
        spent = state["spentCents"]
        for threshold in THRESHOLDS:
            if spent * 100 < cap * threshold:
                continue
            claim = f"{install['_id']}|{state['periodStart']}|{threshold}"
            try:
                await self.store[ALERTS].insert_one(
                    {"_id": claim, "installId": install["_id"], "at": utcnow()}
                )
            except DuplicateKeyError:
                continue  # already sent this period
            email = await self._deployer_email(install)
            if email is None:
                log.warning("spend alert with no address", extra={"installId": install["_id"]})
                continue
            reached = "reached" if threshold == 100 else f"passed {threshold}% of"
            await self.mailer.send(
                email,
                f"Install {install.get('name') or install['_id']} has {reached} its monthly spend cap",
                f"This period the install has spent {money(spent)} of its {money(cap)} monthly cap.\n\n"
                + (
                    f"New runs are refused until the period resets at {state['periodResetsAt']}, "
                    "or until you raise the cap (PATCH /api/installs/:installId/limits)."
                    if threshold == 100
                    else "At the cap, new runs are refused until the period resets."
                ),
                kind=f"install.spend_cap_{threshold}",
            )

    async def _deployer_email(self, install: Document) -> str | None:
        account_email = await user_email(self.store, install.get("deployedBy"))
        if account_email:
            return str(account_email)
        email = install.get("deployerEmail")
        return str(email) if email else None
