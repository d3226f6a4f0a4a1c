"""What one run costs its deployer, with the same maths as the invoice (svc/billing/usage.py).

The run detail shows it (docs/runs.md). A completed run is priced like a period holding
that run alone: `per_run` the price, `per_k_tokens` its tokens per 1,000 rounded up to a
cent; a failed run costs nothing. The invoice rounds per install and period, so the sum
of many runs' costs can exceed their invoice by under a cent per run; the invoice wins.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from svc.billing.usage import amount_cents, price_segments, split_fee
from svc.core import Document, Store, utcnow
from svc.templates import PLATFORM_FEE_PERCENT, find_template


def run_cost(pricing_model: str, price_cents: int | None, completed: bool, tokens: int) -> dict[str, Any]:
    """`{pricingModel, priceUsdCents, amountCents, envelopeFeeCents, builderAmountCents, ...}`."""
    amount = amount_cents(pricing_model, price_cents, 1 if completed else 0, tokens if completed else 0)
    fee, builder = split_fee(amount)
    return {
        "pricingModel": pricing_model,
        "priceUsdCents": price_cents,
        "billedTokens": tokens if completed else 0,
        "amountCents": amount,
        "envelopeFeePercent": PLATFORM_FEE_PERCENT,
        "envelopeFeeCents": fee,
        "builderAmountCents": builder,
    }


async def run_charge(
    store: Store, install: Document, completed: bool, billable: bool, tokens: int, at: datetime | None = None
) -> tuple[str, int | None, int]:
    """(pricing model, price in cents, amount in cents) one run is billed: the template's price in
    force when the run ended, the invoice's maths for a period holding this run alone. A failed run
    costs nothing, except the tokens of one its token cap stopped (`billable`, per_k_tokens)."""
    template = await find_template(
        store, install.get("templateId"), "pricingModel", "priceUsdCents", "priceHistory"
    )
    if template is None:
        return "free", None, 0
    at = at or utcnow()
    segments = price_segments(template, at, at + timedelta(milliseconds=1))
    model, price = (
        (segments[0][0], segments[0][1])
        if segments
        else (template.get("pricingModel", "free"), template.get("priceUsdCents"))
    )
    amount = amount_cents(model, price, 1 if completed else 0, tokens if completed or billable else 0)
    return model, price, amount
