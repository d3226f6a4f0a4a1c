"""A price change of a published template waits for the next billing period.

Deployers installed at a price; a builder who changes it must not reprice usage already
made, nor surprise them mid-period. So a change to a published template is recorded in
`priceHistory` (each entry a price and the moment it takes effect): the new price takes
effect at the start of the next billing period (the next calendar month, UTC: the billing
cycle's default schedule), deployers with active installs are mailed, and billing prices
each part of a period at the price in force then (svc/billing/usage.py `price_segments`).
The template's `pricingModel`/`priceUsdCents` show the newest price (what the listing
offers); a draft, which nobody has installed, changes at once. docs/billing.md.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from svc.core import Document, InstallLookups, Mailer, Store, aware, iso
from svc.identity import user_emails

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def next_period_start(now: datetime) -> datetime:
    """The start of the next billing period: the first of next month, 00:00 UTC."""
    now = aware(now).astimezone(UTC)
    if now.month == 12:
        return datetime(now.year + 1, 1, 1, tzinfo=UTC)
    return datetime(now.year, now.month + 1, 1, tzinfo=UTC)


def period_start(now: datetime) -> datetime:
    """The start of the billing period `now` is in: the first of its month, 00:00 UTC."""
    now = aware(now).astimezone(UTC)
    return datetime(now.year, now.month, 1, tzinfo=UTC)


def price_in_force(template: Document, at: datetime) -> tuple[str, int | None]:
    """(pricing model, price) in force at `at`."""
    model, price = template.get("pricingModel", "free"), template.get("priceUsdCents")
    for entry in sorted(template.get("priceHistory") or [], key=lambda e: aware(e["from"])):
        if aware(entry["from"]) <= at:
            model, price = entry["pricingModel"], entry.get("priceUsdCents")
    return model, price


def scheduled_history(
    template: Document, model: str, price: int | None, effective: datetime
) -> list[Document]:
    """The price history with (model, price) taking effect at `effective`; a change not yet in
    force is replaced by a newer one."""
    history = [dict(e) for e in template.get("priceHistory") or []] or [
        {
            "pricingModel": template["pricingModel"],
            "priceUsdCents": template.get("priceUsdCents"),
            "from": EPOCH,
        }
    ]
    kept = [e for e in history if aware(e["from"]) < effective]
    last = kept[-1] if kept else None
    if last is None or (last["pricingModel"], last.get("priceUsdCents")) != (model, price):
        kept.append({"pricingModel": model, "priceUsdCents": price, "from": effective})
    return kept


def display(model: str, price: int | None) -> str:
    """`Free`, `$0.50 per run`, `$0.20 per 1K tokens`."""
    if model == "free":
        return "Free"
    cents = price or 0
    unit = "run" if model == "per_run" else "1K tokens"
    return f"${cents // 100:,}.{cents % 100:02d} per {unit}"


async def notify_deployers(
    store: Store,
    mailer: Mailer,
    installs_of: InstallLookups,
    template: Document,
    old: tuple[str, int | None],
    effective: datetime,
) -> int:
    """Mail each deployer with an active install of the template about the new price; how many."""
    installs = await installs_of.active_of(template["_id"], "deployedBy", "deployerEmail", limit=10_000)
    user_ids = {i["deployedBy"] for i in installs if i.get("deployedBy")}
    account_email = await user_emails(store, user_ids)
    emails = {
        email
        for i in installs
        if (email := account_email.get(i.get("deployedBy")) or i.get("deployerEmail")) is not None
    }
    new = display(template["pricingModel"], template.get("priceUsdCents"))
    subject = f"{template['name']}: the price changes to {new} on {effective:%Y-%m-%d}"
    body = (
        f"The builder of {template['name']} ({template['slug']}) changed its price from "
        f"{display(*old)} to {new}.\n\n"
        f"The new price applies from the next billing period, starting {iso(effective)}; usage "
        "until then is billed at the current price. Cancel or cap your install before then if "
        "the new price does not suit you."
    )
    for email in sorted(emails):
        await mailer.send(email, subject, body, kind="template.price_change")
    return len(emails)


def pricing_answer(effective: datetime | None) -> dict[str, Any]:
    """The extra fields of PATCH /api/billing/pricing: when the price takes effect."""
    return {"effectiveFrom": iso(effective) if effective is not None else None}
