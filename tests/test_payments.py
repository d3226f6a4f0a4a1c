"""Payment endpoints over HTTP against the fake payment provider and the outbox/SMTP sink."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.support.accounts import app_store, bearer, create_key, signup
from tests.support.billing import (
    APP_KEY,
    CARD,
    charge_cycle,
    paid_install,
    payment_settings,
    post_event,
    report,
    setup_intent,
    start_fake_stripe,
)
from tests.support.runs import ingest, ingest_body, start_paperclip

# ---- not configured ----------------------------------------------------------------------------


async def test_payment_endpoints_answer_503_without_a_provider(make_client: Any) -> None:
    client = await make_client(**payment_settings(None))
    user = await signup(client)
    calls = [
        ("POST", "/api/stripe/setup-intent", {"email": "a@example.com"}, bearer(APP_KEY)),
        ("POST", "/api/stripe/charge-cycle", {"installId": "x", "amountCents": 100}, bearer(APP_KEY)),
        ("POST", "/api/stripe/connect/onboard", {"returnUrl": "https://example.com/back"}, user.cookie),
        ("GET", "/api/stripe/connect/status", None, user.cookie),
        ("PATCH", "/api/stripe/installs/x/cancel", None, user.cookie),
        ("GET", "/api/stripe/my-earnings", None, user.cookie),
        ("POST", "/api/stripe/webhook", {"id": "evt_1"}, {"Stripe-Signature": "t=1,v1=00"}),
    ]
    for method, path, body, headers in calls:
        response = await client.request(method, path, json=body, headers=headers)
        assert response.status == 503, (path, await response.text())
        assert (await response.json())["error"] == "Payments are not configured"
    # Everything else still works.
    deal = await paid_install(client, None)
    response = await client.get(
        "/api/billing", params={"templateId": deal.template["id"]}, headers=bearer(deal.builder_key)
    )
    assert response.status == 200


# ---- setup intent ------------------------------------------------------------------------------


async def test_setup_intent_creates_a_customer(make_client: Any, aiohttp_server: Any) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    body = await setup_intent(client, "Deployer@Example.com")
    assert body["customerId"] in fake.customers
    assert fake.customers[body["customerId"]]["email"] == "deployer@example.com"
    assert body["clientSecret"].startswith("seti_") and "_secret_" in body["clientSecret"]
    response = await client.post("/api/stripe/setup-intent", json={"email": "nope"}, headers=bearer(APP_KEY))
    assert response.status == 400
    user = await signup(client)
    key_response = await client.post("/api/auth/keys", json={}, headers=user.cookie)
    personal = (await key_response.json())["key"]
    response = await client.post(
        "/api/stripe/setup-intent", json={"email": "a@b.co"}, headers=bearer(personal)
    )
    assert response.status == 401  # an application key is required


# ---- Connect -----------------------------------------------------------------------------------


async def test_connect_onboarding_and_status(make_client: Any, aiohttp_server: Any) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    builder = await signup(client)
    status = await client.get("/api/stripe/connect/status", headers=builder.cookie)
    assert await status.json() == {"status": "not_connected"}
    response = await client.post(
        "/api/stripe/connect/onboard",
        json={"returnUrl": "https://app.example.com/payouts"},
        headers=builder.cookie,
    )
    assert response.status == 200, await response.text()
    assert (await response.json())["url"].startswith(fake.base_url + "/connect/setup/")
    assert len(fake.accounts) == 1
    account_id = next(iter(fake.accounts))
    status = await client.get("/api/stripe/connect/status", headers=builder.cookie)
    assert await status.json() == {"status": "pending_onboarding"}
    # Re-calling onboard resumes with the same account.
    response = await client.post(
        "/api/stripe/connect/onboard",
        json={"returnUrl": "https://app.example.com/payouts"},
        headers=builder.cookie,
    )
    assert response.status == 200
    assert len(fake.accounts) == 1
    fake.complete_onboarding(account_id)
    status = await (await client.get("/api/stripe/connect/status", headers=builder.cookie)).json()
    assert status["status"] == "active"
    assert status["dashboardUrl"].endswith(f"/express/{account_id}/dashboard")
    fake.restrict(account_id)
    status = await (await client.get("/api/stripe/connect/status", headers=builder.cookie)).json()
    assert status == {"status": "restricted"}


async def test_connect_without_enrollment_is_422(make_client: Any, aiohttp_server: Any) -> None:
    fake = await start_fake_stripe(aiohttp_server, connect_enabled=False)
    client = await make_client(**payment_settings(fake))
    builder = await signup(client)
    response = await client.post(
        "/api/stripe/connect/onboard", json={"returnUrl": "https://app.example.com/p"}, headers=builder.cookie
    )
    assert response.status == 422
    body = await response.json()
    assert body["code"] == "connect_enrollment_required"
    assert body["dashboardUrl"].startswith("https://")
    assert body["error"]
    for bad in ({"returnUrl": "javascript:alert(1)"}, {}, {"returnUrl": 5}):
        response = await client.post("/api/stripe/connect/onboard", json=bad, headers=builder.cookie)
        assert response.status == 400
    response = await client.get("/api/stripe/connect/status", headers=bearer("svc_live_" + "0" * 32))
    assert response.status == 401


async def onboarded(client: Any, fake: Any, caller: Any) -> str:
    """Take the builder through onboarding; their payout account id."""
    await client.post(
        "/api/stripe/connect/onboard", json={"returnUrl": "https://app.example.com/p"}, headers=caller.cookie
    )
    account_id = list(fake.accounts)[-1]
    fake.complete_onboarding(account_id)
    status = await (await client.get("/api/stripe/connect/status", headers=caller.cookie)).json()
    assert status["status"] == "active"
    return account_id


# ---- charge-cycle ------------------------------------------------------------------------------


async def test_charge_cycle_charges_once_with_the_fee_split(make_client: Any, aiohttp_server: Any) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    deal = await paid_install(client, fake)
    account_id = await onboarded(client, fake, deal.builder)
    period = {"periodStart": "2026-10-01T00:00:00Z", "periodEnd": "2026-11-01T00:00:00Z"}
    response = await charge_cycle(client, installId=deal.install_id, amountCents=1001, **period)
    assert response.status == 200, await response.text()
    body = await response.json()
    assert body["status"] == "succeeded" and body["amountCents"] == 1001
    intent = fake.payment_intents[body["paymentIntentId"]]
    assert intent["amount"] == 1001
    assert intent["customer"] == deal.customer_id and intent["payment_method"] == CARD
    assert intent["application_fee_amount"] == 100  # 10% of 10.01, rounded
    assert intent["transfer_data"] == {"destination": account_id}
    assert fake.intent_keys[intent["id"]]
    again = await charge_cycle(client, installId=deal.install_id, amountCents=1001, **period)
    assert await again.json() == {"status": "already_paid", "invoiceId": body["invoiceId"]}
    assert len(fake.succeeded_charges()) == 1
    invoice = await app_store(client)["invoices"].find_one({"_id": body["invoiceId"]})
    assert invoice["feeCents"] + invoice["builderAmountCents"] == 1001
    assert invoice["builderAmountCents"] == 901


async def test_racing_charge_cycles_charge_once(make_client: Any, aiohttp_server: Any) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    deal = await paid_install(client, fake)
    responses = await asyncio.gather(
        *(charge_cycle(client, installId=deal.install_id, amountCents=500) for _ in range(5))
    )
    bodies = [await response.json() for response in responses]
    assert all(response.status == 200 for response in responses), bodies
    assert sorted(body["status"] for body in bodies) == ["already_paid"] * 4 + ["succeeded"]
    assert len({body["invoiceId"] for body in bodies}) == 1
    assert len(fake.succeeded_charges()) == 1


async def test_charge_cycle_defaults_to_the_previous_calendar_month(
    make_client: Any, aiohttp_server: Any
) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    deal = await paid_install(client, fake)
    body = await (await charge_cycle(client, installId=deal.install_id, amountCents=50)).json()
    invoice = await app_store(client)["invoices"].find_one({"_id": body["invoiceId"]})
    now = datetime.now(UTC)
    this_month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    assert invoice["periodEnd"] == this_month
    assert invoice["periodStart"] == (this_month - timedelta(days=1)).replace(day=1)
    # Builder without an active payout account: the share is held, no transfer.
    intent = fake.payment_intents[body["paymentIntentId"]]
    assert intent["transfer_data"] is None and intent["application_fee_amount"] is None


async def test_charge_cycle_bad_input(make_client: Any, aiohttp_server: Any) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    deal = await paid_install(client, fake)
    bad_bodies = [
        {"installId": deal.install_id, "amountCents": 49},
        {"installId": deal.install_id, "amountCents": 50.5},
        {"installId": deal.install_id, "amountCents": "100"},
        {"installId": deal.install_id},
        {"amountCents": 100},
        {
            "installId": deal.install_id,
            "amountCents": 100,
            "periodStart": "yesterday",
            "periodEnd": "2026-01-01",
        },
        {"installId": deal.install_id, "amountCents": 100, "periodStart": "2026-02-01T00:00:00Z"},
        {
            "installId": deal.install_id,
            "amountCents": 100,
            "periodStart": "2026-02-01T00:00:00Z",
            "periodEnd": "2026-01-01T00:00:00Z",
        },
    ]
    for body in bad_bodies:
        response = await charge_cycle(client, **body)
        assert response.status == 400, (body, await response.text())
    response = await charge_cycle(client, installId="missing", amountCents=100)
    assert response.status == 404
    assert fake.charge_attempts == 0
    response = await client.post(
        "/api/stripe/charge-cycle",
        json={"installId": deal.install_id, "amountCents": 100},
        headers=bearer("wrong"),
    )
    assert response.status == 401


async def test_scoped_app_key_charges_its_install_only(make_client: Any, aiohttp_server: Any) -> None:
    from config.settings import AppKey

    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    deal = await paid_install(client, fake)
    other = await paid_install(client, fake)
    scoped = await make_client(
        **payment_settings(fake, app_api_keys=(AppKey(key="scoped-key", install_id=deal.install_id),))
    )
    response = await scoped.post(
        "/api/stripe/charge-cycle",
        json={"installId": other.install_id, "amountCents": 100},
        headers=bearer("scoped-key"),
    )
    assert response.status == 403
    response = await scoped.post(
        "/api/stripe/charge-cycle",
        json={"installId": deal.install_id, "amountCents": 100},
        headers=bearer("scoped-key"),
    )
    assert response.status == 200


async def test_declined_card_then_retry_with_a_new_attempt(make_client: Any, aiohttp_server: Any) -> None:
    fake = await start_fake_stripe(aiohttp_server, declined_methods={"pm_card_declined"})
    client = await make_client(**payment_settings(fake))
    deal = await paid_install(client, fake, card="pm_card_declined")
    response = await charge_cycle(client, installId=deal.install_id, amountCents=300)
    assert response.status == 402
    body = await response.json()
    assert "declined" in body["error"] and body["code"] == "payment_declined"
    invoice = await app_store(client)["invoices"].find_one({"installId": deal.install_id})
    assert invoice["status"] == "failed" and invoice["attempt"] == 1
    failures = await app_store(client)["metric_counters"].find_one({"name": "payment_failures"})
    assert (failures["labels"], failures["value"]) == ({"reason": "declined"}, 1), "counted for /metrics"
    # The deployer saves a working card; the same period is retried with a new idempotency key.
    await app_store(client).installs.update_one(
        {"_id": deal.install_id}, {"$set": {"payPaymentMethodId": CARD}}
    )
    response = await charge_cycle(client, installId=deal.install_id, amountCents=300)
    assert response.status == 200, await response.text()
    assert (await response.json())["status"] == "succeeded"
    invoice = await app_store(client)["invoices"].find_one({"installId": deal.install_id})
    assert invoice["status"] == "paid" and invoice["attempt"] == 2
    assert len(fake.succeeded_charges()) == 1


async def test_install_without_payment_method_cannot_be_charged(
    make_client: Any, aiohttp_server: Any
) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    deal = await paid_install(client, fake, card=None)
    response = await charge_cycle(client, installId=deal.install_id, amountCents=300)
    assert response.status == 409
    assert "payment method" in (await response.json())["error"]


# ---- cancel billing ----------------------------------------------------------------------------
# The usage comes from orchA installs reporting through their install token, as Paperclip's
# reporter does (billing is the same on every platform; `svc` installs take no reports).


async def test_cancel_bills_usage_since_the_last_paid_period(make_client: Any, aiohttp_server: Any) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    paperclip = await start_paperclip(aiohttp_server)
    deal = await paid_install(client, fake, model="per_run", price=30, platform="orchA", upstream=paperclip)
    for _ in range(2):
        await report(client, deal)
    await report(client, deal, status="failed")
    response = await client.patch(
        f"/api/stripe/installs/{deal.install_id}/cancel", headers=deal.deployer.cookie
    )
    assert response.status == 200, await response.text()
    assert await response.json() == {"status": "cancelled", "charged": True, "amountCents": 60}
    assert [pi["amount"] for pi in fake.succeeded_charges()] == [60]
    store = app_store(client)
    install = await store.installs.find_one({"_id": deal.install_id})
    assert install["status"] == "cancelled"
    receipt = await store["outbox"].find_one({"to": deal.deployer.email, "kind": "cancel_receipt"})
    assert receipt is not None and "$0.60" in receipt["body"]
    response = await client.patch(
        f"/api/stripe/installs/{deal.install_id}/cancel", headers=deal.deployer.cookie
    )
    assert response.status == 409
    # Its install token stops working: the platform can no longer report runs for it.
    tokens = await store.install_tokens.count_documents({"installId": deal.install_id})
    assert tokens == 0
    assert deal.install_token is not None
    late = await ingest(client, deal.install_token, ingest_body(deal.agents["lead"], runId="after-cancel"))
    assert late.status == 401


async def test_cancel_under_fifty_cents_is_free_but_sends_a_receipt(
    make_client: Any, aiohttp_server: Any
) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    paperclip = await start_paperclip(aiohttp_server)
    deal = await paid_install(client, fake, model="per_run", price=20, platform="orchA", upstream=paperclip)
    await report(client, deal)
    await report(client, deal)
    response = await client.patch(
        f"/api/stripe/installs/{deal.install_id}/cancel", headers=deal.deployer.cookie
    )
    assert await response.json() == {"status": "cancelled", "charged": False, "amountCents": 0}
    assert fake.charge_attempts == 0
    receipt = await app_store(client)["outbox"].find_one(
        {"to": deal.deployer.email, "kind": "cancel_receipt"}
    )
    assert receipt is not None and "under $0.50" in receipt["body"]


async def test_cancel_counts_only_runs_after_the_last_paid_invoice(
    make_client: Any, aiohttp_server: Any
) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    paperclip = await start_paperclip(aiohttp_server)
    deal = await paid_install(client, fake, model="per_run", price=40, platform="orchA", upstream=paperclip)
    for _ in range(3):
        await report(client, deal)
    now = datetime.now(UTC)
    period = {"periodStart": "2026-01-01T00:00:00Z", "periodEnd": now.isoformat()}
    paid = await charge_cycle(client, installId=deal.install_id, amountCents=120, **period)
    assert (await paid.json())["status"] == "succeeded"
    await report(client, deal)
    await report(client, deal)
    response = await client.patch(
        f"/api/stripe/installs/{deal.install_id}/cancel", headers=deal.deployer.cookie
    )
    assert await response.json() == {"status": "cancelled", "charged": True, "amountCents": 80}


async def test_only_the_deployer_can_cancel(make_client: Any, aiohttp_server: Any) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    deal = await paid_install(client, fake)
    stranger = await signup(client)
    for caller in (stranger, deal.builder):
        response = await client.patch(f"/api/stripe/installs/{deal.install_id}/cancel", headers=caller.cookie)
        assert response.status == 404
    response = await client.patch(
        f"/api/stripe/installs/{deal.install_id}/cancel", headers=bearer(deal.deployer_key)
    )
    assert response.status == 401  # a session is required


# ---- earnings ----------------------------------------------------------------------------------


async def test_my_earnings_counts_paid_invoices_only(make_client: Any, aiohttp_server: Any) -> None:
    fake = await start_fake_stripe(aiohttp_server, declined_methods={"pm_card_declined"})
    client = await make_client(**payment_settings(fake))
    deal = await paid_install(client, fake)
    second = await paid_install(
        client, fake, builder=(deal.builder, deal.builder_key), template=deal.template
    )
    declined = await paid_install(
        client,
        fake,
        builder=(deal.builder, deal.builder_key),
        template=deal.template,
        card="pm_card_declined",
    )
    await onboarded(client, fake, deal.builder)
    october = {"periodStart": "2026-10-01T00:00:00Z", "periodEnd": "2026-11-01T00:00:00Z"}
    september = {"periodStart": "2026-09-01T00:00:00Z", "periodEnd": "2026-10-01T00:00:00Z"}
    assert (
        await charge_cycle(client, installId=deal.install_id, amountCents=1000, **september)
    ).status == 200
    assert (await charge_cycle(client, installId=deal.install_id, amountCents=1000, **october)).status == 200
    assert (
        await charge_cycle(client, installId=second.install_id, amountCents=555, **september)
    ).status == 200
    assert (
        await charge_cycle(client, installId=declined.install_id, amountCents=999, **october)
    ).status == 402
    body = await (await client.get("/api/stripe/my-earnings", headers=deal.builder.cookie)).json()
    assert body["totalBuilderAmountCents"] == 900 + 900 + 499  # 555 - 56 (the fee rounds 55.5 up)
    assert body["byTemplate"] == [
        {
            "templateId": deal.template["id"],
            "name": deal.template["name"],
            "slug": deal.template["slug"],
            "paidCount": 3,
            "builderAmountCents": 2299,
            "lastPaidAt": "2026-10-01T00:00:00.000Z",
        }
    ]
    deployer_view = await (await client.get("/api/stripe/my-earnings", headers=deal.deployer.cookie)).json()
    assert deployer_view == {"totalBuilderAmountCents": 0, "byTemplate": []}


# ---- webhook -----------------------------------------------------------------------------------


async def test_webhook_rejects_bad_signatures_and_applies_nothing(
    make_client: Any, aiohttp_server: Any
) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    builder = await signup(client)
    await client.post(
        "/api/stripe/connect/onboard", json={"returnUrl": "https://app.example.com/p"}, headers=builder.cookie
    )
    account_id = next(iter(fake.accounts))
    account = dict(
        fake.accounts[account_id], charges_enabled=True, payouts_enabled=True, details_submitted=True
    )
    payload = fake.event("account.updated", account)
    for signature in (
        "t=1,v1=deadbeef",
        fake.sign(payload, secret="whsec_other"),
        fake.sign(payload, timestamp=1),
    ):
        response = await post_event(client, fake, payload, signature)
        assert response.status == 400, await response.text()
    response = await client.post(
        "/api/stripe/webhook", data=payload, headers={"Content-Type": "application/json"}
    )
    assert response.status == 400
    user = await app_store(client).users.find_one({"_id": builder.id})
    assert user["payout"]["status"] == "pending_onboarding"
    response = await post_event(client, fake, payload)
    assert response.status == 200, await response.text()
    user = await app_store(client).users.find_one({"_id": builder.id})
    assert user["payout"]["status"] == "active"


async def test_webhook_settles_an_invoice_left_processing(make_client: Any, aiohttp_server: Any) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    deal = await paid_install(client, fake)
    store = app_store(client)
    now = datetime.now(UTC)
    await store["invoices"].insert_one(
        {
            "_id": "inv_crashed",
            "installId": deal.install_id,
            "templateId": deal.template["id"],
            "builderUserId": deal.builder.id,
            "periodStart": now - timedelta(days=30),
            "periodEnd": now,
            "amountCents": 100,
            "feeCents": 10,
            "builderAmountCents": 90,
            "status": "processing",
            "attempt": 1,
            "claim": "c1",
            "claimedAt": now,
        }
    )
    intent = {
        "id": "pi_123",
        "object": "payment_intent",
        "metadata": {"invoiceId": "inv_crashed", "attempt": "1"},
    }
    payload = fake.event("payment_intent.succeeded", intent)
    assert (await post_event(client, fake, payload)).status == 200
    assert (await post_event(client, fake, payload)).status == 200  # redelivery: no change, 200
    invoice = await store["invoices"].find_one({"_id": "inv_crashed"})
    assert invoice["status"] == "paid" and invoice["paymentIntentId"] == "pi_123"
    unknown = await post_event(client, fake, fake.event("charge.refunded", {"id": "ch_1"}))
    assert unknown.status == 200
    assert json.loads(await unknown.text()) == {"received": True}


async def test_a_double_cancel_bills_and_mails_once(make_client: Any, aiohttp_server: Any) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    paperclip = await start_paperclip(aiohttp_server)
    deal = await paid_install(client, fake, model="per_run", price=100, platform="orchA", upstream=paperclip)
    await report(client, deal)
    path = f"/api/stripe/installs/{deal.install_id}/cancel"
    first, second = await asyncio.gather(
        client.patch(path, headers=deal.deployer.cookie), client.patch(path, headers=deal.deployer.cookie)
    )
    assert sorted([first.status, second.status]) == [200, 409]
    assert [pi["amount"] for pi in fake.succeeded_charges()] == [100]
    receipts = await app_store(client)["outbox"].count_documents(
        {"to": deal.deployer.email, "kind": "cancel_receipt"}
    )
    assert receipts == 1


async def test_charge_cycle_refuses_overlaps_future_periods_and_free_templates(
    make_client: Any, aiohttp_server: Any
) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    deal = await paid_install(client, fake)
    october = {"periodStart": "2026-10-01T00:00:00Z", "periodEnd": "2026-11-01T00:00:00Z"}
    paid = await (await charge_cycle(client, installId=deal.install_id, amountCents=100, **october)).json()
    overlapping = {"periodStart": "2026-10-15T00:00:00Z", "periodEnd": "2026-11-10T00:00:00Z"}
    response = await charge_cycle(client, installId=deal.install_id, amountCents=100, **overlapping)
    assert response.status == 409
    body = await response.json()
    assert body["invoiceId"] == paid["invoiceId"] and "overlaps" in body["error"]
    future = {"periodStart": "2026-10-01T00:00:00Z", "periodEnd": "2999-01-01T00:00:00Z"}
    response = await charge_cycle(client, installId=deal.install_id, amountCents=100, **future)
    assert response.status == 400
    free = await paid_install(client, fake, model="free", price=None)
    response = await charge_cycle(client, installId=free.install_id, amountCents=100)
    assert response.status == 409
    assert len(fake.succeeded_charges()) == 1
    assert await app_store(client)["invoices"].count_documents({}) == 1


async def test_an_install_names_only_its_own_payment_customer(make_client: Any, aiohttp_server: Any) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    victim = await setup_intent(client, "victim@example.com")
    deal = await paid_install(client, fake, card=None)
    template_id = deal.template["id"]
    for body, fragment in (
        ({"payCustomerId": "cus_made_up", "payPaymentMethodId": CARD}, "unknown customer"),
        (
            {
                "payCustomerId": victim["customerId"],
                "payPaymentMethodId": CARD,
                "deployerEmail": "me@example.com",
            },
            "deployerEmail",
        ),
        ({"payPaymentMethodId": CARD}, "payCustomerId"),
    ):
        response = await client.post(
            "/api/installs",
            json={"templateId": template_id, "platform": "svc", **body},
            headers=bearer(await create_key(client, deal.deployer)),
        )
        assert response.status == 400, await response.text()
        assert fragment in (await response.json())["error"]


async def test_held_builder_shares_are_paid_out_once_onboarding_completes(
    make_client: Any, aiohttp_server: Any
) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    deal = await paid_install(client, fake)
    september = {"periodStart": "2026-09-01T00:00:00Z", "periodEnd": "2026-10-01T00:00:00Z"}
    body = await (await charge_cycle(client, installId=deal.install_id, amountCents=1000, **september)).json()
    invoice = await app_store(client)["invoices"].find_one({"_id": body["invoiceId"]})
    assert invoice["payout"] == "held" and fake.transfers == {}
    account_id = await onboarded(client, fake, deal.builder)  # the status call sees it active...
    assert fake.transfers == {}  # ...and, a read, moves no money
    await post_event(client, fake, fake.event("account.updated", fake.accounts[account_id]))
    [transfer] = fake.transfers.values()
    assert (transfer["amount"], transfer["destination"]) == (900, account_id)
    invoice = await app_store(client)["invoices"].find_one({"_id": body["invoiceId"]})
    assert (invoice["payout"], invoice["transferId"]) == ("routed", transfer["id"])
    # Later status calls and provider events move nothing again.
    await client.get("/api/stripe/connect/status", headers=deal.builder.cookie)
    await post_event(client, fake, fake.event("account.updated", fake.accounts[account_id]))
    assert len(fake.transfers) == 1


async def test_a_declined_period_is_not_retried_over_a_period_billed_since(
    make_client: Any, aiohttp_server: Any
) -> None:
    fake = await start_fake_stripe(aiohttp_server, declined_methods={"pm_card_declined"})
    client = await make_client(**payment_settings(fake))
    deal = await paid_install(client, fake, card="pm_card_declined")
    september = {"periodStart": "2026-09-01T00:00:00Z", "periodEnd": "2026-10-01T00:00:00Z"}
    quarter = {"periodStart": "2026-09-01T00:00:00Z", "periodEnd": "2026-11-01T00:00:00Z"}
    assert (await charge_cycle(client, installId=deal.install_id, amountCents=100, **september)).status == 402
    await app_store(client).installs.update_one(
        {"_id": deal.install_id}, {"$set": {"payPaymentMethodId": CARD}}
    )
    assert (await charge_cycle(client, installId=deal.install_id, amountCents=200, **quarter)).status == 200
    response = await charge_cycle(client, installId=deal.install_id, amountCents=100, **september)
    assert response.status == 409 and "overlaps" in (await response.json())["error"]
    assert len(fake.succeeded_charges()) == 1
