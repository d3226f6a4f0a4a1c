"""What one run costs its deployer, with the same maths as the invoice (svc/billing/usage.py).

The run detail shows it (docs/runs.md). A completed run is priced like a period holding
that run alone: `per_run` the price, `per_k_tokens` its tokens per 1,000 rounded up to a
cent; a failed run costs nothing. The invoice rounds per install and period, so the sum
of many runs' costs can exceed their invoice by under a cent per run; the invoice wins.
"""

from __future__ import annotations

from typing import Any

from svc.billing.usage import amount_cents, split_fee
from svc.templates import PLATFORM_FEE_PERCENT


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
