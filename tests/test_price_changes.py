"""A builder's price change of a published template: deployers are mailed, usage already made (and
the rest of the current period) keeps the price in force, the new price applies from the next
billing period. A draft's price changes at once (nobody installed it).

The usage comes from an orchA install reporting its runs through the install token, as
Paperclip's reporter does (billing is the same on every platform; `svc` installs take no reports)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from svc.billing.usage import price_segments
from svc.core import aware, utcnow
from svc.templates import next_period_start
from tests.support.accounts import bearer
from tests.support.billing import billing, paid_install, payment_settings, report
from tests.support.runs import start_paperclip
from tests.support.templates import create_template


async def set_price(client: Any, key: str, template_id: str, model: str, price: int | None) -> Any:
    body = {"templateId": template_id, "pricingModel": model, "priceUsdCents": price}
    return await client.patch("/api/billing/pricing", json=body, headers=bearer(key))


async def total(client: Any, key: str, template_id: str) -> int:
    response = await billing(client, key, templateId=template_id)
    assert response.status == 200, await response.text()
    return int((await response.json())["billing"]["totalAmountCents"])


async def test_a_price_change_waits_for_the_next_period_and_deployers_are_told(
    make_client, aiohttp_server, store
):
    client = await make_client(**payment_settings(None))
    paperclip = await start_paperclip(aiohttp_server)
    deal = await paid_install(client, None, model="per_run", price=25, platform="orchA", upstream=paperclip)
    template_id = deal.template["id"]
    for _ in range(2):
        await report(client, deal, status="completed")
    assert await total(client, deal.builder_key, template_id) == 50

    response = await set_price(client, deal.builder_key, template_id, "per_run", 100)
    assert response.status == 200, await response.text()
    body = await response.json()
    effective = next_period_start(utcnow())
    assert body["priceUsdCents"] == 100 and body["effectiveFrom"] == effective.isoformat()[:19] + ".000Z"

    # The deployer is told, once, what changes and when.
    mails = await store["outbox"].find({"kind": "template.price_change"}).to_list(None)
    assert [m["to"] for m in mails] == [deal.deployer.email]
    assert "$0.25 per run" in mails[0]["body"] and "$1.00 per run" in mails[0]["subject"]

    # Usage already made, and usage made later in this period, keep the old price.
    assert await total(client, deal.builder_key, template_id) == 50
    await report(client, deal, status="completed")
    assert await total(client, deal.builder_key, template_id) == 75
    limits = await client.patch(
        f"/api/installs/{deal.install_id}/limits",
        json={"monthlyCapCents": 1000},
        headers=bearer(deal.deployer_key),
    )
    assert (await limits.json())["spentCents"] == 75

    # A second change in the same period replaces the pending one; the new price starts next period.
    assert (await set_price(client, deal.builder_key, template_id, "per_run", 80)).status == 200
    stored = await store["templates"].find_one({"_id": template_id})
    assert [(e["priceUsdCents"], aware(e["from"]) == effective) for e in stored["priceHistory"]] == [
        (25, False),
        (80, True),
    ]
    start = effective - timedelta(days=3)
    segments = price_segments(stored, start, effective + timedelta(days=3))
    assert [(model, price, low, high) for model, price, low, high in segments] == [
        ("per_run", 25, start, effective),
        ("per_run", 80, effective, effective + timedelta(days=3)),
    ]
    assert await total(client, deal.builder_key, template_id) == 75


async def test_a_draft_price_changes_at_once(make_client, store):
    client = await make_client(**payment_settings(None))
    deal = await paid_install(client, None, model="per_run", price=25)
    draft = await create_template(client, deal.builder_key, pricingModel="per_run", priceUsdCents=10)
    response = await set_price(client, deal.builder_key, draft["id"], "per_k_tokens", 3)
    assert response.status == 200
    assert (await response.json())["effectiveFrom"] is None
    stored = await store["templates"].find_one({"_id": draft["id"]})
    assert stored["pricingModel"] == "per_k_tokens" and "priceHistory" not in stored
    assert await store["outbox"].count_documents({"kind": "template.price_change"}) == 0
