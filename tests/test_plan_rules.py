"""Org plans (svc/orgs/plans.py) as tables, against the embedded database, no app.

The payment routes' own tests (tests/test_org_billing.py, tests/test_orgs_governance.py) drive
plans through the webhook, the fake provider and a local Ray; this is the fast test `make
mutate` runs against the rules (docs/testing.md): which subscription status is Pro, which ends
governance (`cancelled` and none do, `past_due` does not: issue #23), what is written and
audited, claiming an org for a subscription, the operator override and the billing status.
Plans never calls the payment provider itself, so no fake server is needed here.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from svc.core import BadRequest, NotFound, Store
from svc.identity import Principal
from svc.orgs import ApprovalDecisionBody
from tests.support.governance import NOW, Services, audit_events, seed_waiting_install

STAMP = "2030-03-15T12:00:00.000Z"  # NOW on the wire
PERIOD_END = NOW + timedelta(days=30)
TRIAL_END = NOW + timedelta(days=14)
REPLACEABLE = ("incomplete", "incomplete_expired", "paused", "canceled")  # svc/billing/org_billing.py


async def org(store: Store, org_id: str) -> dict[str, Any]:
    doc = await store.orgs.find_one({"_id": org_id})
    assert doc is not None
    return doc


async def apply(gov: Services, org_id: str, status: str | None, **fields: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "trial_end": None,
        "current_period_end": PERIOD_END,
        "cancel_at_period_end": False,
        "customer_id": None,
        "subscription_id": None,
    }
    values.update(fields)
    return await gov.plans.apply_subscription(org_id, status=status, **values)


async def waiting_request(gov: Services, org_id: str = "o-pro") -> str:
    """An install waiting for approval in the org, and its pending request."""
    await seed_waiting_install(gov.store, f"i-{org_id}", org_id)
    doc = await gov.store.installs.find_one({"_id": f"i-{org_id}"})
    assert doc is not None
    return await gov.governance.request_approval(doc, Principal("session", user_id="u-member"))


async def request_status(store: Store, approval_id: str) -> str:
    doc = await store["org_approvals"].find_one({"_id": approval_id})
    assert doc is not None
    return str(doc["status"])


# ---- the plan each status gives, and what ends governance ---------------------------------

# (status, plan, does a Pro org's waiting request lapse?)
STATUS_ROWS = [
    ("active", "pro", False),
    ("trialing", "pro", False),
    ("past_due", "free", False),  # the provider retrying a payment: approvals wait for the outcome
    ("cancelled", "free", True),
    (None, "free", True),
]


@pytest.mark.parametrize(("status", "plan", "lapses"), STATUS_ROWS)
async def test_each_status_on_a_pro_org(gov: Services, status: str | None, plan: str, lapses: bool) -> None:
    store = gov.store
    approval_id = await waiting_request(gov)
    view = await apply(gov, "o-pro", status, cancel_at_period_end=True)
    assert view["plan"] == plan and view["id"] == "o-pro" and view["slug"] == "prime"
    assert view["currentPeriodEnd"] == "2030-04-14T12:00:00.000Z" and view["cancelAtPeriodEnd"] is True
    assert view["governanceEnabled"] is True  # the setting stays; it applies only while Pro
    stored = await org(store, "o-pro")
    assert stored["plan"] == plan and stored["subscriptionStatus"] == status
    assert await request_status(store, approval_id) == ("approved" if lapses else "pending")
    waiting = await store.installs.find_one({"_id": "i-o-pro"})
    assert waiting is not None and waiting["status"] == ("completed" if lapses else "pending")
    assert await gov.governance.requires_approval({"kind": "org", "id": "o-pro"}) is (plan == "pro")


@pytest.mark.parametrize(("status", "plan", "lapses"), STATUS_ROWS)
async def test_a_free_org_has_nothing_to_lapse(
    gov: Services, status: str | None, plan: str, lapses: bool
) -> None:
    # Seeded: a request left pending on a free org (as after a plan change no path lapsed).
    approval_id = await waiting_request(gov, "o-free")
    assert (await apply(gov, "o-free", status))["plan"] == plan
    assert await request_status(gov.store, approval_id) == "pending"


async def test_an_org_with_no_plan_stored_is_free_before(gov: Services) -> None:
    await gov.store.orgs.update_one({"_id": "o-calm"}, {"$unset": {"plan": ""}})
    approval_id = await waiting_request(gov, "o-calm")
    await apply(gov, "o-calm", "cancelled")
    assert await request_status(gov.store, approval_id) == "pending"  # free before: nothing lapsed
    requested, updated = await audit_events(gov.store, "o-calm")  # by action
    assert requested["action"] == "approval.requested"
    assert updated["action"] == "billing.subscription_updated" and updated["meta"]["previousPlan"] == "free"


@pytest.mark.parametrize("status", ["canceled", "unpaid", "incomplete", "Active", ""])
async def test_a_status_outside_the_spec_is_refused(gov: Services, status: str) -> None:
    with pytest.raises(BadRequest) as refused:
        await apply(gov, "o-pro", status)
    assert str(refused.value) == "status: must be one of active, trialing, past_due, cancelled or null"
    stored = await org(gov.store, "o-pro")
    assert stored["plan"] == "pro" and "subscriptionStatus" not in stored
    assert await audit_events(gov.store, "o-pro") == []


# ---- what is written and audited -----------------------------------------------------------


async def test_every_field_is_written_and_the_change_audited(gov: Services) -> None:
    store = gov.store
    await apply(gov, "o-free", "trialing", trial_end=TRIAL_END, customer_id="cus_1", subscription_id="sub_1")
    stored = await org(store, "o-free")
    assert {k: stored.get(k) for k in ("plan", "subscriptionStatus", "trialEndsAt", "currentPeriodEnd")} == {
        "plan": "pro",
        "subscriptionStatus": "trialing",
        "trialEndsAt": TRIAL_END,
        "currentPeriodEnd": PERIOD_END,
    }
    assert stored["cancelAtPeriodEnd"] is False
    assert stored["planUpdatedAt"] == NOW and stored["updatedAt"] == NOW
    assert stored["payCustomerId"] == "cus_1" and stored["paySubscriptionId"] == "sub_1"
    # None keeps what is stored; every other field is overwritten.
    view = await apply(gov, "o-free", "active", current_period_end=None, cancel_at_period_end=True)
    stored = await org(store, "o-free")
    assert stored["payCustomerId"] == "cus_1" and stored["paySubscriptionId"] == "sub_1"
    assert stored["trialEndsAt"] is None and stored["currentPeriodEnd"] is None
    assert stored["cancelAtPeriodEnd"] is True
    assert view["currentPeriodEnd"] is None and view["cancelAtPeriodEnd"] is True
    # (the helper orders events by meta: cancelAtPeriodEnd False first)
    assert await audit_events(store, "o-free") == [
        {
            "action": "billing.subscription_updated",
            "actorId": None,
            "actorEmail": None,
            "meta": {
                "source": "payment_provider",
                "status": "trialing",
                "plan": "pro",
                "previousPlan": "free",
                "trialEndsAt": "2030-03-29T12:00:00.000Z",
                "currentPeriodEnd": "2030-04-14T12:00:00.000Z",
                "cancelAtPeriodEnd": False,
            },
        },
        {
            "action": "billing.subscription_updated",
            "actorId": None,
            "actorEmail": None,
            "meta": {
                "source": "payment_provider",
                "status": "active",
                "plan": "pro",
                "previousPlan": "pro",
                "trialEndsAt": None,
                "currentPeriodEnd": None,
                "cancelAtPeriodEnd": True,
            },
        },
    ]


@pytest.mark.parametrize("org_id", ["o-del", "o-none"])
async def test_an_org_being_deleted_or_unknown_is_not_found(gov: Services, org_id: str) -> None:
    with pytest.raises(NotFound) as missing:
        await apply(gov, org_id, "active")
    assert str(missing.value) == "Org not found"
    assert await audit_events(gov.store, org_id) == []
    if org_id == "o-del":
        assert "subscriptionStatus" not in await org(gov.store, "o-del")


# ---- the operator override -----------------------------------------------------------------


async def test_the_operator_sets_pro_as_an_active_subscription_and_free_as_none(gov: Services) -> None:
    store = gov.store
    await store.orgs.update_one({"_id": "o-free"}, {"$set": {"payCustomerId": "cus_9", "trialEndsAt": NOW}})
    view = await gov.plans.set_plan("acme", "pro")
    assert view["plan"] == "pro" and view["id"] == "o-free"
    stored = await org(store, "o-free")
    assert stored["subscriptionStatus"] == "active" and stored["payCustomerId"] == "cus_9"
    assert stored["trialEndsAt"] is None and stored["currentPeriodEnd"] is None
    assert stored["cancelAtPeriodEnd"] is False
    approval_id = await waiting_request(gov, "o-free")
    assert (await gov.plans.set_plan("acme", "free"))["plan"] == "free"
    stored = await org(store, "o-free")
    assert stored["subscriptionStatus"] is None
    assert await request_status(store, approval_id) == "approved"  # the lapse: no status is the end
    events = await audit_events(store, "o-free")
    metas = [e["meta"] for e in events if e["action"] == "billing.subscription_updated"]
    assert sorted((m["source"], str(m["status"]), m["plan"], m["previousPlan"]) for m in metas) == [
        ("operator", "None", "free", "pro"),
        ("operator", "active", "pro", "free"),
    ]
    assert all(m["cancelAtPeriodEnd"] is False and m["trialEndsAt"] is None for m in metas)


@pytest.mark.parametrize("slug", ["gone", "nope"])
async def test_the_operator_override_needs_a_live_org(gov: Services, slug: str) -> None:
    with pytest.raises(NotFound) as missing:
        await gov.plans.set_plan(slug, "pro")
    assert str(missing.value) == "Org not found"
    assert "subscriptionStatus" not in await org(gov.store, "o-del")


# ---- claiming an org for a completed checkout's subscription -------------------------------


def held(subscription: str | None, status: str | None = None, provider: str | None = None) -> dict[str, Any]:
    """What an org holds: its subscription id, the spec's status, the provider's own status."""
    fields = {"paySubscriptionId": subscription, "subscriptionStatus": status}
    return {**fields, "payProviderStatus": provider} if provider is not None else fields


# (what the org holds, does sub_new claim it?)
CLAIM_ROWS = [
    ({}, True),  # never subscribed
    (held(None), True),
    (held("sub_new", "trialing", "claimed"), True),  # its own subscription
    (held("sub_old", "active", "active"), False),  # a live one: the new one is the duplicate
    (held("sub_old", "past_due", "past_due"), False),  # still may pay
    (held("sub_old", "trialing", "claimed"), False),  # claimed, not read yet
    (held("sub_old", "cancelled", "active"), True),  # ended
    *[(held("sub_old", None, provider), True) for provider in REPLACEABLE],  # pays for nothing
    (held("sub_old", "active", "paused"), True),
    (held("sub_old"), True),  # stored before the provider status was kept: never live
    (held("sub_old", None, "active"), False),
    ({"paySubscriptionId": "sub_old", "payProviderStatus": "active"}, False),
    ({"paySubscriptionId": "sub_old", "subscriptionStatus": "active"}, False),
]


@pytest.mark.parametrize(("holds", "claims"), CLAIM_ROWS)
async def test_the_claim_table(gov: Services, holds: dict[str, Any], claims: bool) -> None:
    store = gov.store
    await store.orgs.update_one({"_id": "o-calm"}, {"$set": holds} if holds else {"$unset": {"x": ""}})
    before = await org(store, "o-calm")
    changes = {"payCustomerId": "cus_new", "paySubscriptionId": "sub_new"}
    claimed = await gov.plans.claim_subscription("o-calm", "sub_new", changes, REPLACEABLE)
    after = await org(store, "o-calm")
    if claims:
        assert claimed == before  # the org before the claim
        assert after == {**before, **changes, "trialUsed": True, "payProviderStatus": "claimed"}
    else:
        assert claimed is None and after == before


async def test_a_claim_names_its_org_and_honours_the_replaceable_list(gov: Services) -> None:
    store = gov.store
    held = {"paySubscriptionId": "sub_old", "subscriptionStatus": None, "payProviderStatus": "paused"}
    await store.orgs.update_one({"_id": "o-calm"}, {"$set": held})
    changes = {"paySubscriptionId": "sub_new"}
    assert await gov.plans.claim_subscription("o-calm", "sub_new", changes, ("incomplete",)) is None
    assert await gov.plans.claim_subscription("o-none", "sub_new", changes, REPLACEABLE) is None
    claimed = await gov.plans.claim_subscription("o-calm", "sub_new", changes, ("paused",))
    assert claimed is not None and claimed["paySubscriptionId"] == "sub_old"
    assert "trialUsed" not in await org(store, "o-pro")  # no other org touched


# (what the org holds, is sub_1's provider status kept?)
NOTE_ROWS = [
    ({"paySubscriptionId": "sub_1"}, True),
    ({"paySubscriptionId": None}, True),
    ({}, True),
    ({"paySubscriptionId": "sub_2"}, False),  # a replaced subscription's late status is not kept
]


@pytest.mark.parametrize(("holds", "kept"), NOTE_ROWS)
async def test_the_provider_status_is_kept_for_the_orgs_own_subscription(
    gov: Services, holds: dict[str, Any], kept: bool
) -> None:
    store = gov.store
    await store.orgs.update_one({"_id": "o-calm"}, {"$set": {**holds, "payProviderStatus": "claimed"}})
    await gov.plans.note_provider_status("o-calm", "sub_1", "past_due")
    assert (await org(store, "o-calm"))["payProviderStatus"] == ("past_due" if kept else "claimed")
    assert "payProviderStatus" not in await org(store, "o-pro")


# ---- the billing status members read ---------------------------------------------------------

# (trial end relative to NOW, trialDaysLeft): whole days rounded up, 0 once past
TRIAL_ROWS = [
    (timedelta(days=14), 14),
    (timedelta(days=13, seconds=1), 14),
    (timedelta(days=13, hours=23, minutes=59, seconds=59), 14),
    (timedelta(days=1), 1),
    (timedelta(seconds=1), 1),
    (timedelta(0), 0),
    (timedelta(days=-3), 0),
]


@pytest.mark.parametrize(("left", "days"), TRIAL_ROWS)
async def test_trial_days_left(gov: Services, left: timedelta, days: int) -> None:
    await apply(gov, "o-calm", "trialing", trial_end=NOW + left)
    status = await gov.plans.billing_status("u-member", "calm")
    assert status["trialDaysLeft"] == days and isinstance(status["trialDaysLeft"], int)
    assert status["trialEndsAt"] == (NOW + left).isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def test_the_billing_status_of_a_trial_and_of_none(gov: Services) -> None:
    await apply(gov, "o-calm", "trialing", trial_end=TRIAL_END, customer_id="cus_1")
    assert await gov.plans.billing_status("u-member", "calm") == {
        "plan": "pro",
        "subscriptionStatus": "trialing",
        "trialEndsAt": "2030-03-29T12:00:00.000Z",
        "trialDaysLeft": 14,
        "hasCustomer": True,
        "planUpdatedAt": STAMP,
        "isPro": True,
        "isTrialing": True,
    }
    await gov.store.orgs.update_one({"_id": "o-free"}, {"$unset": {"plan": ""}})
    assert await gov.plans.billing_status("u-owner", "acme") == {
        "plan": "free",
        "subscriptionStatus": None,
        "trialEndsAt": None,
        "trialDaysLeft": None,
        "hasCustomer": False,
        "planUpdatedAt": None,
        "isPro": False,
        "isTrialing": False,
    }


@pytest.mark.parametrize(("status", "pro", "trialing"), [("active", True, False), ("past_due", False, False)])
async def test_the_billing_status_follows_the_stored_status(
    gov: Services, status: str, pro: bool, trialing: bool
) -> None:
    await apply(gov, "o-calm", status, customer_id="")
    read = await gov.plans.billing_status("u-admin", "calm")
    assert read["isPro"] is pro and read["isTrialing"] is trialing and read["hasCustomer"] is False
    assert read["plan"] == ("pro" if pro else "free") and read["subscriptionStatus"] == status


async def test_the_billing_status_is_for_members(gov: Services) -> None:
    with pytest.raises(NotFound):
        await gov.plans.billing_status("u-out", "calm")
    with pytest.raises(NotFound):
        await gov.plans.billing_status("u-owner", "gone")


async def test_a_decided_request_does_not_lapse_again(gov: Services) -> None:
    approval_id = await waiting_request(gov)
    await gov.approvals.decide("u-owner", "prime", approval_id, ApprovalDecisionBody(status="rejected"))
    await apply(gov, "o-pro", "cancelled")
    assert await request_status(gov.store, approval_id) == "rejected"
