"""Usage billing: the maths, in one place, and GET /api/billing.

Rules (docs/billing.md): amounts are integer cents. `per_run` charges the price per
completed run; `per_k_tokens` charges the price per 1,000 tokens (input plus output)
of completed runs, rounded up to the next cent per install and period. Failed runs
are counted but never billed. The platform fee is 10% rounded half up to a cent and
the builder receives the rest, so the two always add up to the total. A period's
total is the sum of its installs' amounts (each install is charged separately).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, Field, model_validator
from pymongo import DESCENDING

from svc.core import BadRequest, Document, Forbidden, NotFound, Store, aware, iso, utcnow
from svc.identity import Principal
from svc.installs import find_install
from svc.runs import usage_by_install
from svc.templates import PLATFORM_FEE_PERCENT, is_owner, template_by_id_or_slug

MIN_CHARGE_CENTS = 50
PAID_MODELS = ("per_run", "per_k_tokens")
MONTH_DAYS = 30
MAX_PERIOD_DAYS = 365


# ---- the maths ---------------------------------------------------------------------


def split_fee(total_cents: int) -> tuple[int, int]:
    """(platform fee, builder share): 10% rounded half up, and the rest."""
    fee = (total_cents * PLATFORM_FEE_PERCENT + 50) // 100
    return fee, total_cents - fee


def amount_cents(pricing_model: str, price_cents: int | None, completed_runs: int, billed_tokens: int) -> int:
    """What one install owes for a period's completed runs and their tokens."""
    if pricing_model == "per_run":
        return completed_runs * (price_cents or 0)
    if pricing_model == "per_k_tokens":
        return -(-billed_tokens * (price_cents or 0) // 1000)  # ceiling division
    return 0


def money(cents: int) -> str:
    """`$1,234.56`."""
    return f"${cents // 100:,}.{cents % 100:02d}"


def price_display(pricing_model: str, price_cents: int | None) -> str:
    """`Free`, `$0.50 per run`, `$0.20 per 1K tokens`."""
    if pricing_model == "per_run":
        return f"{money(price_cents or 0)} per run"
    if pricing_model == "per_k_tokens":
        return f"{money(price_cents or 0)} per 1K tokens"
    return "Free"


def projected_monthly(total_cents: int, days: int) -> int:
    """The period's amount scaled to a 30-day month, rounded half up."""
    return (total_cents * MONTH_DAYS * 2 + days) // (days * 2)


# ---- usage (from the hourly run counters, svc/run_stats.py) ---------------------------


def is_paid(pricing_model: str | None) -> bool:
    """Whether usage under this pricing model costs anything."""
    return pricing_model in PAID_MODELS


def ever_paid(template: Document) -> bool:
    """Paid now, or at some time in its price history (a usage period may still owe at that price)."""
    return is_paid(template.get("pricingModel")) or any(
        is_paid(entry.get("pricingModel")) for entry in template.get("priceHistory") or []
    )


def price_segments(
    template: Document, start: datetime, end: datetime
) -> list[tuple[str, int | None, datetime, datetime]]:
    """[start, end) cut where the template's price in force changes: (model, price, from, to) each.

    A price change of a published template takes effect at the start of the next billing
    period (svc/templates/price_changes.py records it in `priceHistory`), so usage is always
    priced at the price in force when it was made (docs/billing.md).
    """
    history = sorted(template.get("priceHistory") or [], key=lambda entry: aware(entry["from"]))
    if not history:
        return [(template.get("pricingModel", "free"), template.get("priceUsdCents"), start, end)]
    segments: list[tuple[str, int | None, datetime, datetime]] = []
    for index, entry in enumerate(history):
        low = max(start, aware(entry["from"]))
        high = min(end, aware(history[index + 1]["from"])) if index + 1 < len(history) else end
        if low < high:
            segments.append((entry["pricingModel"], entry.get("priceUsdCents"), low, high))
    return segments


async def install_amount(
    store: Store, install_id: str, template: Document, start: datetime, end: datetime
) -> int:
    """What an install owes for its completed runs in [start, end), each part of the period at
    the price in force then."""
    total = 0
    for model, price, low, high in price_segments(template, start, end):
        if not is_paid(model):
            continue
        usage = await usage_by_install(store, {"installId": install_id}, low, high)
        if usage:
            total += amount_cents(model, price, usage[0].completed, usage[0].billed_tokens)
    return total


async def billed_until(store: Store, install: Document) -> datetime:
    """Where the install's unbilled period starts: the end of its last paid (or still settling)
    invoice, or its creation."""
    last = await store["invoices"].find_one(
        {"installId": install["_id"], "status": {"$in": ["paid", "processing"]}},
        sort=[("periodEnd", DESCENDING)],
    )
    return aware(last["periodEnd"]) if last else aware(install["createdAt"])


# ---- GET /api/billing ------------------------------------------------------------------


class BillingQuery(BaseModel):
    """Query of GET /api/billing."""

    templateId: str | None = Field(default=None, min_length=1, max_length=64)
    templateSlug: str | None = Field(default=None, min_length=1, max_length=200)
    installId: str | None = Field(default=None, min_length=1, max_length=64)
    periodDays: int = Field(default=MONTH_DAYS, ge=1, le=MAX_PERIOD_DAYS)

    @model_validator(mode="after")
    def _one_template(self) -> BillingQuery:
        if self.templateId is None and self.templateSlug is None:
            raise ValueError("templateId or templateSlug is required")
        return self


class UsageReport:
    """The billing view of a template: its builder sees every install, a deployer their own."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def report(
        self, principal: Principal, query: BillingQuery, now: datetime | None = None
    ) -> Document:
        """The spec's GET /api/billing body."""
        # The scope check comes first: after the lookup it told a missing slug from a private one.
        if principal.install_id is not None and query.installId != principal.install_id:
            raise Forbidden(f"This key is scoped to install {principal.install_id}; pass that installId")
        template = await self._template(query)
        scope: Document = {"templateId": template["_id"]}
        install = None
        if query.installId is not None:
            of_template = {"templateId": template["_id"]}
            install = await find_install(self.store, query.installId, "owner", where=of_template)
            scope = {"installId": query.installId}
        # The builder sees every install; a deployer the install they own and no other (404 alike).
        if not is_owner(principal, template) and (install is None or not is_owner(principal, install)):
            raise NotFound("Template not found")
        if query.installId is not None and install is None:
            raise NotFound("Install not found")
        end = now or utcnow()
        start = end - timedelta(days=query.periodDays)
        model, price = template["pricingModel"], template.get("priceUsdCents")
        # Each part of the period is priced at the price in force then (a change waits a period).
        rows: dict[str, dict[str, int]] = {}
        usage = []
        for seg_model, seg_price, low, high in price_segments(template, start, end):
            # A part ending now reads its current hour from the hour counter, not the runs.
            open_end = now is None and high == end
            for u in await usage_by_install(self.store, scope, low, high, open_end=open_end):
                usage.append(u)
                row = rows.setdefault(u.install_id, {"runs": 0, "tokens": 0, "amountCents": 0})
                row["runs"] += u.runs
                row["tokens"] += u.tokens
                row["amountCents"] += amount_cents(seg_model, seg_price, u.completed, u.billed_tokens)
        by_install: list[Document] = [
            {"installId": install_id, **row} for install_id, row in sorted(rows.items())
        ]
        total = sum(row["amountCents"] for row in by_install)
        fee, builder = split_fee(total)
        projected = projected_monthly(total, query.periodDays)
        return {
            "templateId": template["_id"],
            "templateSlug": template["slug"],
            "pricing": {
                "model": model,
                "priceUsdCents": price,
                "envelopeFeePercent": PLATFORM_FEE_PERCENT,
                "priceDisplay": price_display(model, price),
            },
            "period": {"days": query.periodDays, "start": iso(start), "end": iso(end)},
            "usage": {
                "totalRuns": sum(u.runs for u in usage),
                "completedRuns": sum(u.completed for u in usage),
                "totalTokens": sum(u.tokens for u in usage),
                "billedTokens": sum(u.billed_tokens for u in usage),
            },
            "billing": {
                "totalAmountCents": total,
                "builderAmountCents": builder,
                "envelopeFeeCents": fee,
                "projectedMonthlyAmountCents": projected,
                "totalAmountDisplay": money(total),
                "projectedMonthlyDisplay": money(projected),
            },
            "byInstall": by_install,
        }

    async def _template(self, query: BillingQuery) -> Document:
        # One index-covered look-up (by id, or by slug), the rest checked in Python.
        template = await template_by_id_or_slug(self.store, query.templateId, query.templateSlug)
        if template is None:
            raise NotFound("Template not found")
        return template


def check_period(start: datetime, end: datetime) -> None:
    """400 unless the period runs forwards."""
    if start >= end:
        raise BadRequest("periodStart must be before periodEnd")
