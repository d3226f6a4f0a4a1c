"""Provider events against the service: Checkout and subscription sequences, webhook delivery
(claim, apply, done; timestamps), Connect accounts and transfers. No independent emulator
implements these, so the fake (checked against the provider's API description) drives them,
and each test asserts what the org, invoice or payout record ends as."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine

from svc.billing.claim_timeouts import CLAIM_LEASE
from svc.core.clock import utcnow
from tests.fakes.stripe import reverse_transfer, start_subscription
from tests.support.accounts import app_store, signup
from tests.support.billing import charge_cycle, paid_install, payment_settings, post_event, start_fake_stripe
from tests.support.orgs import audit_actions, ok, send, world

SEPTEMBER = {"periodStart": "2026-09-01T00:00:00Z", "periodEnd": "2026-10-01T00:00:00Z"}


# ---- event sequences: Checkout and subscriptions (defect 1) -----------------------------------


@pytest.fixture
async def paying(make_client: Any, aiohttp_server: Any) -> tuple[Any, Any]:
    """A fake payment provider and an app that uses it."""
    fake = await start_fake_stripe(aiohttp_server)
    return fake, await make_client(**payment_settings(fake))


async def deliver(
    client: Any, fake: Any, kind: str, obj: dict[str, Any], event_id: str | None = None
) -> None:
    """The provider sends this event; the webhook acknowledges it."""
    response = await post_event(client, fake, fake.event(kind, obj, event_id))
    assert response.status == 200, await response.text()


async def open_checkout(client: Any, fake: Any, w: Any) -> dict[str, Any]:

    await ok(await send(client, w.owner, "POST", f"{w.base}/billing/checkout"))
    return dict(list(fake.checkout_sessions.values())[-1])


async def test_checkout_completed_after_an_incomplete_subscription_keeps_the_paid_one(paying: Any) -> None:

    fake, client = paying
    w = await world(client)
    # The first attempt's payment needs action: the subscription stays `incomplete`.
    first_session = await open_checkout(client, fake, w)
    first = start_subscription(fake, first_session["id"], trial_days=0, status="incomplete")
    await deliver(client, fake, "customer.subscription.created", first)
    org = await app_store(client).orgs.find_one({"_id": w.org["id"]})
    assert org["plan"] == "free"
    # The owner tries again and pays: a new, active subscription.
    second_session = await open_checkout(client, fake, w)
    second = start_subscription(fake, second_session["id"], trial_days=0)
    await deliver(client, fake, "customer.subscription.created", second)
    await deliver(client, fake, "checkout.session.completed", fake.checkout_sessions[second_session["id"]])
    assert fake.subscriptions[second["id"]]["status"] == "active"  # the paid one is never cancelled
    org = await app_store(client).orgs.find_one({"_id": w.org["id"]})
    assert (org["plan"], org["subscriptionStatus"], org["paySubscriptionId"]) == (
        "pro",
        "active",
        second["id"],
    )
    # The abandoned one is ended at the provider, so it can never bill the org as well.
    assert fake.subscriptions[first["id"]]["status"] == "canceled"
    # Its late events change nothing.
    await deliver(client, fake, "customer.subscription.deleted", fake.subscriptions[first["id"]])
    org = await app_store(client).orgs.find_one({"_id": w.org["id"]})
    assert (org["plan"], org["paySubscriptionId"]) == ("pro", second["id"])


async def test_an_incomplete_subscription_that_becomes_active_makes_the_org_pro(paying: Any) -> None:

    fake, client = paying
    w = await world(client)
    session = await open_checkout(client, fake, w)
    subscription = start_subscription(fake, session["id"], trial_days=0, status="incomplete")
    await deliver(client, fake, "customer.subscription.created", subscription)
    fake.subscriptions[subscription["id"]]["status"] = "active"  # the customer completed the payment
    await deliver(client, fake, "checkout.session.completed", fake.checkout_sessions[session["id"]])
    await deliver(client, fake, "customer.subscription.updated", fake.subscriptions[subscription["id"]])
    org = await app_store(client).orgs.find_one({"_id": w.org["id"]})
    assert (org["plan"], org["subscriptionStatus"]) == ("pro", "active")
    assert fake.subscriptions[subscription["id"]]["status"] == "active"


async def test_a_deleted_subscription_returns_the_org_to_free(paying: Any) -> None:

    fake, client = paying
    w = await world(client)
    session = await open_checkout(client, fake, w)
    subscription = start_subscription(fake, session["id"], trial_days=0)
    await deliver(client, fake, "checkout.session.completed", fake.checkout_sessions[session["id"]])
    fake.subscriptions[subscription["id"]]["status"] = "canceled"
    await deliver(client, fake, "customer.subscription.deleted", fake.subscriptions[subscription["id"]])
    org = await app_store(client).orgs.find_one({"_id": w.org["id"]})
    assert (org["plan"], org["subscriptionStatus"]) == ("free", "cancelled")


# ---- webhook delivery (issue 17 items 13 and 14) ---------------------------------------------------


async def test_future_dated_webhooks_are_refused(paying: Any) -> None:
    import time

    fake, client = paying
    payload = fake.event("charge.refunded", {"id": "ch_1"}, "evt_future")
    for offset in (3600, 301):
        response = await post_event(
            client, fake, payload, fake.sign(payload, timestamp=int(time.time()) + offset)
        )
        assert response.status == 400, await response.text()
    assert await app_store(client)["payment_events"].count_documents({}) == 0
    # Within the tolerance (a provider clock a little ahead) it is accepted.
    response = await post_event(client, fake, payload, fake.sign(payload, timestamp=int(time.time()) + 60))
    assert response.status == 200


async def test_concurrent_deliveries_of_one_event_apply_it_once(paying: Any) -> None:
    import asyncio

    fake, client = paying
    w = await world(client)
    session = await open_checkout(client, fake, w)
    subscription = start_subscription(fake, session["id"], trial_days=0)
    payload = fake.event("checkout.session.completed", fake.checkout_sessions[session["id"]], "evt_once")
    responses = await asyncio.gather(*(post_event(client, fake, payload) for _ in range(6)))
    statuses = sorted(response.status for response in responses)
    assert set(statuses) <= {200, 409} and 200 in statuses, statuses
    for response in responses:
        if response.status == 409:  # still being applied: the provider delivers it again later
            assert "being processed" in (await response.json())["error"]
    assert (await post_event(client, fake, payload)).status == 200  # a redelivery once done: no change
    updates = [
        a for a in await audit_actions(client, w.org["id"]) if a["action"] == "billing.subscription_updated"
    ]
    assert len(updates) == 1
    [record] = [doc async for doc in app_store(client)["payment_events"].find({})]
    assert (record["_id"], record["status"]) == ("evt_once", "done")
    assert fake.subscriptions[subscription["id"]]["status"] == "active"


async def test_an_event_whose_apply_crashed_is_applied_on_redelivery(paying: Any) -> None:
    fake, client = paying
    builder_cookie = (await signup(client)).cookie
    await client.post(
        "/api/stripe/connect/onboard", json={"returnUrl": "https://app.example.com/p"}, headers=builder_cookie
    )
    account_id = next(iter(fake.accounts))
    fake.complete_onboarding(account_id)
    payload = fake.event("account.updated", fake.accounts[account_id], "evt_crashed")
    # A process claimed this event, then died before applying it (its claim is past the lease).
    stale = datetime.now(UTC) - timedelta(minutes=10)
    await app_store(client)["payment_events"].insert_one(
        {"_id": "evt_crashed", "status": "applying", "claimedAt": stale, "receivedAt": stale}
    )
    assert (await post_event(client, fake, payload)).status == 200
    user = await app_store(client).users.find_one({"payout.accountId": account_id})
    assert user["payout"]["status"] == "active"
    record = await app_store(client)["payment_events"].find_one({"_id": "evt_crashed"})
    assert record["status"] == "done"


# ---- Connect and transfers (issue 17 item 17) --------------------------------------------------------


async def held_invoice(client: Any, fake: Any) -> tuple[Any, dict[str, Any]]:
    """A paid invoice whose builder share is held (no payout account yet)."""
    deal = await paid_install(client, fake)
    body = await (await charge_cycle(client, installId=deal.install_id, amountCents=1000, **SEPTEMBER)).json()
    invoice = await app_store(client)["invoices"].find_one({"_id": body["invoiceId"]})
    assert invoice["payout"] == "held"
    return deal, dict(invoice)


async def onboard(client: Any, fake: Any, caller: Any) -> str:
    response = await client.post(
        "/api/stripe/connect/onboard", json={"returnUrl": "https://app.example.com/p"}, headers=caller.cookie
    )
    assert response.status == 200
    account_id = list(fake.accounts)[-1]
    fake.complete_onboarding(account_id)
    return account_id


async def test_reading_the_connect_status_never_moves_money(paying: Any) -> None:
    fake, client = paying
    deal, invoice = await held_invoice(client, fake)
    account_id = await onboard(client, fake, deal.builder)
    for _ in range(3):
        status = await (await client.get("/api/stripe/connect/status", headers=deal.builder.cookie)).json()
        assert status["status"] == "active"
    assert fake.transfers == {}
    # The provider's event moves it, once.
    await deliver(client, fake, "account.updated", fake.accounts[account_id])
    [transfer] = fake.transfers.values()
    assert (transfer["amount"], transfer["destination"]) == (900, account_id)
    stored = await app_store(client)["invoices"].find_one({"_id": invoice["_id"]})
    assert (stored["payout"], stored["transferId"]) == ("routed", transfer["id"])


async def test_a_declined_payout_transfer_is_final_until_the_next_account_event(
    make_client: Any, aiohttp_server: Any
) -> None:
    from api.context import SERVICES

    fake = await start_fake_stripe(aiohttp_server, fail_transfers=True)
    client = await make_client(**payment_settings(fake))
    deal, invoice = await held_invoice(client, fake)
    account_id = await onboard(client, fake, deal.builder)
    await deliver(client, fake, "account.updated", fake.accounts[account_id])
    stored = await app_store(client)["invoices"].find_one({"_id": invoice["_id"]})
    assert stored["payout"] == "declined" and "insufficient" in stored["payoutFailure"]
    tries = len([r for r in fake.requests if r[1] == "/v1/transfers"])
    # Neither the monthly job's sweep nor status reads retry it, however long it waits.
    charges = client.server.app[SERVICES].charges
    await app_store(client)["invoices"].update_one(
        {"_id": invoice["_id"]}, {"$set": {"transferClaimedAt": datetime.now(UTC) - timedelta(days=2)}}
    )
    assert await charges.pay_out_held() == 0
    await client.get("/api/stripe/connect/status", headers=deal.builder.cookie)
    assert len([r for r in fake.requests if r[1] == "/v1/transfers"]) == tries
    # The next account event (funds are there now) resolves it with a new transfer key.
    fake.fail_transfers = False
    await deliver(client, fake, "account.updated", fake.accounts[account_id])
    [transfer] = fake.transfers.values()
    stored = await app_store(client)["invoices"].find_one({"_id": invoice["_id"]})
    assert (stored["payout"], stored["transferId"]) == ("routed", transfer["id"])
    keys = {r[2].get("metadata", {}).get("invoiceId") for r in fake.requests if r[1] == "/v1/transfers"}
    assert keys == {invoice["_id"]}
    assert len(fake.transfers) == 1


async def test_a_reversed_transfer_is_recorded_and_not_paid_again(paying: Any) -> None:

    fake, client = paying
    deal, invoice = await held_invoice(client, fake)
    account_id = await onboard(client, fake, deal.builder)
    await deliver(client, fake, "account.updated", fake.accounts[account_id])
    [transfer] = fake.transfers.values()
    await deliver(client, fake, "transfer.reversed", reverse_transfer(fake, transfer["id"]))
    stored = await app_store(client)["invoices"].find_one({"_id": invoice["_id"]})
    assert stored["payout"] == "reversed" and stored["payoutReversedCents"] == 900
    await deliver(client, fake, "account.updated", fake.accounts[account_id])
    assert len(fake.transfers) == 1  # a reversal is the platform's decision: never re-sent


async def test_account_updates_set_the_payout_status(paying: Any) -> None:
    fake, client = paying
    builder = await signup(client)
    account_id = await onboard(client, fake, builder)
    await deliver(client, fake, "account.updated", fake.accounts[account_id])
    user = await app_store(client).users.find_one({"_id": builder.id})
    assert user["payout"]["status"] == "active"
    fake.restrict(account_id)
    await deliver(client, fake, "account.updated", fake.accounts[account_id])
    user = await app_store(client).users.find_one({"_id": builder.id})
    assert user["payout"]["status"] == "restricted"
    # An account we do not know: acknowledged, recorded once, nothing changes.
    stranger = dict(fake.accounts[account_id], id="acct_unknown")
    await deliver(client, fake, "account.updated", stranger, "evt_stranger")
    await deliver(client, fake, "account.updated", stranger, "evt_stranger")
    assert await app_store(client)["payment_events"].count_documents({"_id": "evt_stranger"}) == 1
    user = await app_store(client).users.find_one({"_id": builder.id})
    assert user["payout"]["status"] == "restricted"


async def test_events_about_objects_we_do_not_know_change_nothing_and_are_recorded_once(paying: Any) -> None:
    fake, client = paying
    _, invoice = await held_invoice(client, fake)
    intent = {
        "id": "pi_unknown",
        "object": "payment_intent",
        "metadata": {"invoiceId": "inv_nope", "attempt": "1"},
    }
    subscription = {"id": "sub_unknown", "object": "subscription", "status": "active", "metadata": {}}
    for kind, obj, event_id in (
        ("payment_intent.succeeded", intent, "evt_a"),
        (
            "payment_intent.payment_failed",
            {**intent, "metadata": {"invoiceId": invoice["_id"], "attempt": "9"}},
            "evt_b",
        ),
        ("customer.subscription.updated", subscription, "evt_c"),
        ("transfer.reversed", {"id": "tr_unknown", "object": "transfer", "amount_reversed": 5}, "evt_d"),
    ):
        for _ in range(2):
            await deliver(client, fake, kind, obj, event_id)
    assert await app_store(client)["payment_events"].count_documents({}) == 4
    stored = await app_store(client)["invoices"].find_one({"_id": invoice["_id"]})
    assert (stored["status"], stored["payout"]) == ("paid", "held")  # an out-of-date attempt changes nothing


async def test_an_org_stored_before_the_provider_status_was_kept_is_not_blocked(paying: Any) -> None:

    fake, client = paying
    w = await world(client)
    # What the earlier code left after an `incomplete` event: the id, no status, no provider status.
    await app_store(client).orgs.update_one(
        {"_id": w.org["id"]},
        {"$set": {"paySubscriptionId": "sub_left_incomplete", "subscriptionStatus": None}},
    )
    session = await open_checkout(client, fake, w)
    subscription = start_subscription(fake, session["id"], trial_days=0)
    await deliver(client, fake, "checkout.session.completed", fake.checkout_sessions[session["id"]])
    assert fake.subscriptions[subscription["id"]]["status"] == "active"
    org = await app_store(client).orgs.find_one({"_id": w.org["id"]})
    assert (org["plan"], org["paySubscriptionId"]) == ("pro", subscription["id"])


@pytest.mark.parametrize("switch", ["transfers_down", "drop_transfer_answers"])
async def test_a_failed_or_unknown_payout_transfer_is_retried_with_the_same_key(
    make_client: Any, aiohttp_server: Any, switch: str
) -> None:
    """Issue #23: a transfer the provider failed (5xx) or whose answer was lost stays `transferring`
    and is retried after the claim's lease with the same idempotency key, so it moves money once."""
    from api.context import SERVICES

    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    deal, invoice = await held_invoice(client, fake)
    account_id = await onboard(client, fake, deal.builder)
    if switch == "transfers_down":
        fake.transfers_down = True
    else:
        fake.drop_transfer_answers = 3  # the SDK's two retries are lost as well
    await deliver(client, fake, "account.updated", fake.accounts[account_id])
    stored = await app_store(client)["invoices"].find_one({"_id": invoice["_id"]})
    assert stored["payout"] == "transferring"
    assert len(fake.transfers) == (0 if switch == "transfers_down" else 1)
    charges = client.server.app[SERVICES].charges
    assert await charges.pay_out_held() == 0  # within the lease: the claim is still someone's

    fake.transfers_down = False
    with time_machine.travel(utcnow() + CLAIM_LEASE + timedelta(minutes=1)):
        assert await charges.pay_out_held() == 1
    stored = await app_store(client)["invoices"].find_one({"_id": invoice["_id"]})
    [transfer] = fake.transfers.values()
    assert (stored["payout"], stored["transferId"]) == ("routed", transfer["id"])
    keys = {key for path, key in fake.keys if path == "/v1/transfers"}
    assert keys == {f"svc-payout:{invoice['_id']}"}
