"""Org plans through the fake payment provider: checkout, webhook-driven plan, portal, cancel."""

from __future__ import annotations

from typing import Any

from tests.fakes.stripe import start_subscription
from tests.support.accounts import app_store
from tests.support.billing import payment_settings, post_event, start_fake_stripe
from tests.support.orgs import audit_actions, ok, send, world


async def event(client: Any, fake: Any, kind: str, obj: dict[str, Any]) -> None:
    """The provider tells us about `obj`; the webhook accepts it."""
    response = await post_event(client, fake, fake.event(kind, obj))
    assert response.status == 200, await response.text()


async def subscribe(client: Any, fake: Any, caller: Any, base: str, **trial: Any) -> tuple[dict, dict]:
    """Checkout as `caller`, complete it at the provider, deliver the event: (session, subscription)."""
    await ok(await send(client, caller, "POST", f"{base}/billing/checkout"))
    session = list(fake.checkout_sessions.values())[-1]
    subscription = start_subscription(fake, session["id"], **trial)
    await event(client, fake, "checkout.session.completed", session)
    return session, subscription


async def status_of(client: Any, caller: Any, slug: str) -> dict[str, Any]:
    return dict(await ok(await send(client, caller, "GET", f"/api/orgs/{slug}/billing/status")))


async def test_checkout_trial_portal_and_cancel(make_client: Any, aiohttp_server: Any) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    w = await world(client)
    base = w.base
    free = await status_of(client, w.member, w.slug)
    assert free["plan"] == "free" and free["isPro"] is False and free["hasCustomer"] is False
    assert (await send(client, w.member, "GET", f"{base}/secrets")).status == 402

    assert (await send(client, w.member, "POST", f"{base}/billing/checkout")).status == 403
    assert (await send(client, w.outsider, "POST", f"{base}/billing/checkout")).status == 404
    body = await ok(await send(client, w.admin, "POST", f"{base}/billing/checkout"))
    [session] = fake.checkout_sessions.values()
    assert body["url"] == session["url"]
    assert session["mode"] == "subscription"
    assert session["client_reference_id"] == w.org["id"]
    assert session["payment_method_collection"] == "always"  # card required
    assert fake.checkout_params[session["id"]]["subscription_data"]["trial_period_days"] == "14"

    # The customer completes the checkout; the provider tells us.
    subscription = start_subscription(fake, session["id"])
    await event(client, fake, "checkout.session.completed", session)
    pro = await status_of(client, w.member, w.slug)
    assert pro["plan"] == "pro" and pro["isPro"] is True and pro["isTrialing"] is True
    assert pro["subscriptionStatus"] == "trialing"
    assert pro["trialDaysLeft"] in (13, 14) and pro["hasCustomer"] is True
    assert (await send(client, w.member, "GET", f"{base}/secrets")).status == 200
    # A second checkout while subscribed is refused.
    assert (await send(client, w.owner, "POST", f"{base}/billing/checkout")).status == 409

    assert (await send(client, w.member, "GET", f"{base}/billing/portal")).status == 403
    portal = await ok(await send(client, w.admin, "GET", f"{base}/billing/portal"))
    assert portal["url"].endswith(f"/portal/{subscription['customer']}")

    assert (await send(client, w.admin, "POST", f"{base}/billing/cancel")).status == 403
    cancelled = await ok(await send(client, w.owner, "POST", f"{base}/billing/cancel"))
    assert cancelled["ok"] is True and "until" in cancelled["message"]
    assert fake.subscriptions[subscription["id"]]["cancel_at_period_end"] is True
    org = await app_store(client).orgs.find_one({"_id": w.org["id"]})
    assert org["cancelAtPeriodEnd"] is True and org["plan"] == "pro"  # no immediate effect
    actions = [event["action"] for event in await audit_actions(client, w.org["id"])]
    assert "billing.checkout_started" in actions and "billing.cancel_requested" in actions

    # At the period's end the provider deletes the subscription: back to free.
    await event(client, fake, "customer.subscription.deleted", fake.subscriptions[subscription["id"]])
    ended = await status_of(client, w.member, w.slug)
    assert ended["plan"] == "free" and ended["subscriptionStatus"] == "cancelled"
    assert (await send(client, w.member, "GET", f"{base}/secrets")).status == 402


async def test_subscription_updates_follow_the_provider(make_client: Any, aiohttp_server: Any) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    w = await world(client)
    _, subscription = await subscribe(client, fake, w.owner, w.base)
    for provider_status, plan, status in (
        ("active", "pro", "active"),
        ("past_due", "free", "past_due"),
        ("active", "pro", "active"),
    ):
        fake.subscriptions[subscription["id"]]["status"] = provider_status
        await event(client, fake, "customer.subscription.updated", fake.subscriptions[subscription["id"]])
        body = await status_of(client, w.owner, w.slug)
        assert (body["plan"], body["subscriptionStatus"]) == (plan, status)


async def test_late_events_of_a_replaced_subscription_change_nothing(
    make_client: Any, aiohttp_server: Any
) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    w = await world(client)
    _, first = await subscribe(client, fake, w.owner, w.base)
    await ok(await send(client, w.owner, "POST", f"{w.base}/billing/cancel"))
    fake.subscriptions[first["id"]]["status"] = "canceled"
    await event(client, fake, "customer.subscription.deleted", fake.subscriptions[first["id"]])
    assert (await status_of(client, w.owner, w.slug))["plan"] == "free"
    # A new checkout: no second trial, a new subscription.
    await ok(await send(client, w.owner, "POST", f"{w.base}/billing/checkout"))
    second_session = list(fake.checkout_sessions.values())[-1]
    assert "trial_period_days" not in fake.checkout_params[second_session["id"]]["subscription_data"]
    second = start_subscription(fake, second_session["id"], trial_days=0)
    fake.subscriptions[second["id"]]["status"] = "active"
    await event(client, fake, "checkout.session.completed", second_session)
    assert (await status_of(client, w.owner, w.slug))["subscriptionStatus"] == "active"
    # A late event of the first subscription (even one claiming it is active) changes nothing.
    late = dict(fake.subscriptions[first["id"]], status="active")
    await event(client, fake, "customer.subscription.updated", late)
    await event(client, fake, "customer.subscription.deleted", fake.subscriptions[first["id"]])
    body = await status_of(client, w.owner, w.slug)
    assert (body["plan"], body["subscriptionStatus"]) == ("pro", "active")


async def test_an_org_with_a_live_subscription_cannot_be_deleted(
    make_client: Any, aiohttp_server: Any
) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    w = await world(client)
    _, subscription = await subscribe(client, fake, w.owner, w.base)
    response = await send(client, w.owner, "DELETE", w.base)
    assert response.status == 409 and "cancel" in (await response.json())["error"]
    await ok(await send(client, w.owner, "POST", f"{w.base}/billing/cancel"))
    await ok(await send(client, w.owner, "DELETE", w.base))
    # The provider's later events about the deleted org are acknowledged and ignored.
    await event(client, fake, "customer.subscription.deleted", subscription)


async def test_org_billing_without_a_provider_is_503(make_client: Any) -> None:
    client = await make_client(**payment_settings(None))
    w = await world(client)
    for method, path in (("POST", "checkout"), ("GET", "portal"), ("POST", "cancel")):
        response = await send(client, w.owner, method, f"{w.base}/billing/{path}")
        assert response.status == 503, path
        assert (await response.json())["error"] == "Payments are not configured"
    assert (await status_of(client, w.owner, w.slug))["plan"] == "free"  # the rest works


async def test_a_second_checkout_completed_meanwhile_is_cancelled(
    make_client: Any, aiohttp_server: Any
) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    w = await world(client)
    # Two checkouts opened before either completes (two tabs, two admins).
    await ok(await send(client, w.owner, "POST", f"{w.base}/billing/checkout"))
    await ok(await send(client, w.admin, "POST", f"{w.base}/billing/checkout"))
    first_session, second_session = fake.checkout_sessions.values()
    first = start_subscription(fake, first_session["id"])
    await event(client, fake, "checkout.session.completed", first_session)
    second = start_subscription(fake, second_session["id"])
    await event(client, fake, "checkout.session.completed", second_session)
    assert fake.subscriptions[second["id"]]["status"] == "canceled"
    assert fake.subscriptions[first["id"]]["status"] == "trialing"
    org = await app_store(client).orgs.find_one({"_id": w.org["id"]})
    assert org["paySubscriptionId"] == first["id"] and org["plan"] == "pro"
    actions = [event["action"] for event in await audit_actions(client, w.org["id"])]
    assert "billing.duplicate_cancelled" in actions
