"""The builder's side of the money (svc/billing/earnings.py) and the payout and webhook service
(svc/billing/payouts.py) as fast tables: no app, no Ray (tests/support/money.py).

The fast tests `make mutate` runs against them (docs/testing.md): which held shares are
transferred, with which idempotency key (the same one after a failure or an unknown outcome, a
new one after a decline is requeued), reversals, the earnings sums, payout accounts, and the
webhook's apply-once claim.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from pydantic import ValidationError

from svc.billing import ChargeCycleBody, OnboardBody, Payouts, SetupIntentBody
from svc.core import Conflict, NotFound, Unprocessable, iso
from svc.identity import Principal
from tests.support.money import T0, Money, money_world

APR = datetime(2025, 4, 1, tzinfo=UTC)
LEASE, KEY_LIFETIME = timedelta(minutes=5), timedelta(hours=23)


@pytest.fixture
async def m(store: Any, make_settings: Any, aiohttp_server: Any) -> Money:
    return await money_world(store, make_settings, aiohttp_server)


async def held(m: Money, *amounts: int, builder: str = "u-b") -> list[dict[str, Any]]:
    """Paid invoices whose builder share is held (the builder had no active payout account),
    written straight into the store as the charge writes them (tests/test_money_charges.py): so
    the charge's mutants are not run against these tests too."""
    if await m.store.users.find_one({"_id": builder}) is None:
        await m.builder(builder, active=False)
    invoices = []
    for n, amount in enumerate(amounts):
        doc = {
            "_id": f"inv-{builder}-{n}",
            "installId": f"i-{builder}-{n}",
            "templateId": f"t-{builder}",
            "builderUserId": builder,
            "payoutAccountId": None,
            "payout": "held",
            "status": "paid",
            "amountCents": amount,
            "feeCents": amount // 10,
            "builderAmountCents": amount - amount // 10,
            "periodStart": T0,
            "periodEnd": APR,
        }
        await m.store["invoices"].insert_one(doc)
        invoices.append(doc)
    return invoices


async def invoice(m: Money, invoice_id: str) -> dict[str, Any]:
    doc = await m.store["invoices"].find_one({"_id": invoice_id})
    assert doc is not None
    return doc


# ---- held shares and their transfers ------------------------------------------------------------


async def test_held_shares_are_transferred_once_the_account_is_active(m: Money) -> None:
    first, second = await held(m, 1000, 2000)
    assert await m.charges.pay_out_held() == 0 and m.fake.transfers == {}
    account = await m.activate("u-b")
    assert await m.charges.pay_out_held() == 2
    transfers = {t["metadata"]["invoiceId"]: t for t in m.fake.transfers.values()}
    assert {i: (t["amount"], t["destination"]) for i, t in transfers.items()} == {
        first["_id"]: (900, account),
        second["_id"]: (1800, account),
    }
    assert sorted(m.transfer_keys()) == sorted(f"svc-payout:{doc['_id']}" for doc in (first, second))
    for doc in (first, second):
        after = await invoice(m, doc["_id"])
        assert (after["payout"], after["transferId"], after["payoutAccountId"]) == (
            "routed",
            transfers[doc["_id"]]["id"],
            account,
        )
    assert await m.charges.pay_out_held() == 0 and len(m.fake.transfers) == 2


async def test_which_invoices_are_due_a_transfer(m: Money) -> None:
    """Invoices seeded straight into the store (only their payout fields are read), on a frozen
    clock: (status, payout, share, claimed ago, started ago) → transferred or not."""
    account = await m.builder("u-b")
    await m.builder("u-idle", active=False)
    now = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)  # forwards only
    ms = timedelta(milliseconds=1)
    rows: list[tuple[str, dict[str, Any], bool]] = [
        ("held", {}, True),
        ("one-cent", {"builderAmountCents": 1}, True),
        ("failed", {"status": "failed"}, False),
        ("processing", {"status": "processing"}, False),
        ("no-share", {"builderAmountCents": 0}, False),
        ("routed", {"payout": "routed"}, False),
        ("declined", {"payout": "declined"}, False),
        ("reversed", {"payout": "reversed"}, False),
        (
            "stale",
            {
                "payout": "transferring",
                "transferClaimedAt": now - LEASE - ms,
                "transferStartedAt": now - LEASE,
            },
            True,
        ),
        (
            "leased",
            {"payout": "transferring", "transferClaimedAt": now - LEASE, "transferStartedAt": now - LEASE},
            False,
        ),
        (
            "key-young",
            {
                "payout": "transferring",
                "transferClaimedAt": now - LEASE - ms,
                "transferStartedAt": now - KEY_LIFETIME + ms,
            },
            True,
        ),
        (
            "key-old",
            {
                "payout": "transferring",
                "transferClaimedAt": now - LEASE - ms,
                "transferStartedAt": now - KEY_LIFETIME,
            },
            False,
        ),
        ("idle-builder", {"builderUserId": "u-idle"}, False),
        ("nobody", {"builderUserId": None}, False),
    ]
    base = {"status": "paid", "payout": "held", "builderUserId": "u-b", "builderAmountCents": 90}
    await m.store["invoices"].insert_many(
        [{"_id": name, "installId": name, **base, **fields} for name, fields, _ in rows]
    )
    with time_machine.travel(now, tick=False):
        assert await m.charges.pay_out_held() == 4
    sent = sorted(t["metadata"]["invoiceId"] for t in m.fake.transfers.values())
    assert sent == sorted(name for name, _, due in rows if due)
    assert {t["destination"] for t in m.fake.transfers.values()} == {account}
    stale = await invoice(m, "stale")
    assert (stale["transferClaimedAt"], stale["transferStartedAt"]) == (
        now,
        now - LEASE,
    )  # the key's start kept
    fresh = await invoice(m, "held")
    assert (fresh["transferClaimedAt"], fresh["transferStartedAt"]) == (now, now)


async def test_one_builder_is_paid_out_alone_when_named(m: Money) -> None:
    [mine] = await held(m, 1000)
    [theirs] = await held(m, 500, builder="u-c")
    await m.activate("u-b")
    await m.activate("u-c")
    assert await m.charges.pay_out_held("u-b") == 1
    assert (await invoice(m, mine["_id"]))["payout"] == "routed"
    assert (await invoice(m, theirs["_id"]))["payout"] == "held"
    assert await m.charges.pay_out_held() == 1


async def test_a_failed_or_unknown_transfer_is_retried_with_the_same_key_after_the_lease(m: Money) -> None:
    [failed, lost] = await held(m, 1000, 2000)
    await m.activate("u-b")
    # The first answers 500 without transferring; the second transfers, and its answers are lost.
    m.fake.transfers_down = True
    await m.store["invoices"].update_one({"_id": lost["_id"]}, {"$set": {"payout": "parked"}})
    assert await m.charges.pay_out_held() == 0
    m.fake.transfers_down = False
    await m.store["invoices"].update_one({"_id": lost["_id"]}, {"$set": {"payout": "held"}})
    m.fake.drop_transfer_answers = 10
    assert await m.charges.pay_out_held() == 0
    m.fake.drop_transfer_answers = 0
    for doc in (failed, lost):
        assert (await invoice(m, doc["_id"]))["payout"] == "transferring"
    assert [t["metadata"]["invoiceId"] for t in m.fake.transfers.values()] == [lost["_id"]]
    tried = len(m.transfer_keys())
    assert await m.charges.pay_out_held() == 0 and len(m.transfer_keys()) == tried  # the lease holds
    with time_machine.travel(datetime.now(UTC) + LEASE + timedelta(seconds=1), tick=True):
        assert await m.charges.pay_out_held() == 2
    assert set(m.transfer_keys()) == {f"svc-payout:{failed['_id']}", f"svc-payout:{lost['_id']}"}
    assert len(m.fake.transfers) == 2  # the lost one replayed, not sent twice
    routed = await invoice(m, lost["_id"])
    assert routed["transferId"] == next(t["id"] for t in m.fake.transfers.values() if t["amount"] == 1800)


async def test_a_declined_transfer_waits_for_a_requeue_and_then_takes_a_new_key(m: Money) -> None:
    [doc] = await held(m, 1000)
    await m.activate("u-b")
    m.fake.fail_transfers = True
    assert await m.charges.pay_out_held() == 0
    declined = await invoice(m, doc["_id"])
    assert declined["payout"] == "declined" and declined["payoutDeclinedAt"]
    assert declined["payoutFailure"] == (
        "The payment provider refused the request: "
        "You have insufficient available funds in your Stripe account."
    )
    m.fake.fail_transfers = False
    assert await m.charges.pay_out_held() == 0  # final until requeued
    for requeue in (1, 2):
        assert await m.charges.builders.requeue_declined("u-b") == 1
        again = await invoice(m, doc["_id"])
        assert (again["payout"], again["transferRequeues"]) == ("held", requeue)
        assert "transferClaimedAt" not in again and "transferStartedAt" not in again
        assert again["updatedAt"] >= declined["payoutDeclinedAt"]
        m.fake.fail_transfers = requeue == 1
        assert await m.charges.pay_out_held() == (requeue - 1)
    assert m.transfer_keys() == [
        f"svc-payout:{doc['_id']}",
        f"svc-payout:{doc['_id']}:1",
        f"svc-payout:{doc['_id']}:2",
    ]
    assert await m.charges.builders.requeue_declined("u-b") == 0  # routed now: nothing to requeue


async def test_a_reversed_transfer_is_recorded(m: Money) -> None:
    base = {"status": "paid", "builderUserId": "u-b", "transferId": "tr_1"}
    cases: list[tuple[str, dict[str, Any], str, Any]] = [
        ("routed", {"id": "tr_1", "amount_reversed": 900}, "reversed", 900),
        ("reversed", {"id": "tr_1", "amount_reversed": 500}, "reversed", 500),
        ("routed", {"id": "tr_1", "amount_reversed": "900"}, "reversed", None),
        ("routed", {"id": "tr_1"}, "reversed", None),
        ("held", {"id": "tr_1", "amount_reversed": 900}, "held", "absent"),
        ("routed", {"id": "tr_2", "amount_reversed": 900}, "routed", "absent"),
        ("routed", {"id": 1, "amount_reversed": 900}, "routed", "absent"),
        ("routed", {"amount_reversed": 900}, "routed", "absent"),
    ]
    for payout, transfer, after, cents in cases:
        await m.store["invoices"].delete_many({})
        await m.store["invoices"].insert_one({"_id": "inv", "payout": payout, **base})
        await m.charges.builders.transfer_reversed(transfer)
        doc = await invoice(m, "inv")
        assert (doc["payout"], doc.get("payoutReversedCents", "absent")) == (after, cents), transfer
        assert ("updatedAt" in doc) == (cents != "absent")


async def test_earnings_sum_the_paid_shares_by_template(m: Money) -> None:
    """Invoices seeded straight into the store: the earnings read only paid ones of the builder."""
    await m.template("t1", {"kind": "user", "id": "u-b"})
    await m.template("t3", {"kind": "user", "id": "u-b"})
    month = [datetime(2025, n, 1, tzinfo=UTC) for n in range(1, 7)]
    seeds = [
        ("t1", "paid", "u-b", 900, month[2]),
        ("t1", "paid", "u-b", 450, month[3]),
        ("t2", "paid", "u-b", 100, month[1]),
        ("t3", "paid", "u-b", 7, month[4]),
        ("t1", "failed", "u-b", 999, month[5]),
        ("t1", "processing", "u-b", 999, month[5]),
        ("t1", "paid", "u-c", 999, month[5]),
    ]
    await m.store["invoices"].insert_many(
        [
            {
                "_id": f"inv{n}",
                "installId": f"i{n}",
                "templateId": t,
                "status": s,
                "builderUserId": b,
                "builderAmountCents": c,
                "periodStart": p,
            }
            for n, (t, s, b, c, p) in enumerate(seeds)
        ]
    )
    assert await m.charges.earnings("u-b") == {
        "totalBuilderAmountCents": 1457,
        "byTemplate": [
            {
                "templateId": "t3",
                "name": "Name t3",
                "slug": "slug-t3",
                "paidCount": 1,
                "builderAmountCents": 7,
                "lastPaidAt": "2025-05-01T00:00:00.000Z",
            },
            {
                "templateId": "t1",
                "name": "Name t1",
                "slug": "slug-t1",
                "paidCount": 2,
                "builderAmountCents": 1350,
                "lastPaidAt": "2025-04-01T00:00:00.000Z",
            },
            {
                "templateId": "t2",
                "name": None,
                "slug": None,
                "paidCount": 1,
                "builderAmountCents": 100,
                "lastPaidAt": "2025-02-01T00:00:00.000Z",
            },
        ],
    }
    assert await m.charges.earnings("u-nobody") == {"totalBuilderAmountCents": 0, "byTemplate": []}


# ---- payment methods and payout accounts --------------------------------------------------------


def test_bodies_are_validated() -> None:
    assert SetupIntentBody(email="  Me@Example.COM ").email == "me@example.com"
    for email in ("not-an-email", "a@", ""):
        with pytest.raises(ValidationError):
            SetupIntentBody(email=email)
    assert OnboardBody(returnUrl="http://a.test/x").returnUrl == "http://a.test/x"
    for url in ("ftp://a.test/x", "https://", "a.test/x", "javascript:alert(1)"):
        with pytest.raises(ValidationError):
            OnboardBody(returnUrl=url)


async def test_a_setup_intent_records_the_customer_it_creates(m: Money) -> None:
    answer = await m.payouts.setup_intent(SetupIntentBody(email="Me@Example.com"))
    customer = answer["customerId"]
    assert m.fake.customers[customer]["email"] == "me@example.com"
    assert answer["clientSecret"] == next(iter(m.fake.setup_intents.values()))["client_secret"]
    record = await m.store["pay_customers"].find_one({"_id": customer})
    assert record["email"] == "me@example.com" and record["createdAt"]


async def test_onboarding_creates_one_payout_account_and_its_status_is_read_back(m: Money) -> None:
    await m.user("u-b")
    assert await m.payouts.status("u-b") == {"status": "not_connected"}
    first = await m.payouts.onboard("u-b", OnboardBody(returnUrl="https://example.com/back"))
    [account] = m.fake.accounts
    assert first["url"].startswith(f"{m.fake.base_url}/connect/setup/{account}/")
    assert m.fake.accounts[account]["email"] == "u-b@example.com"
    assert m.fake.accounts[account]["metadata"] == {"userId": "u-b"}
    assert (await m.store.users.find_one({"_id": "u-b"}))["payout"] == {
        "accountId": account,
        "status": "pending_onboarding",
    }
    await m.payouts.onboard("u-b", OnboardBody(returnUrl="https://example.com/back"))
    assert list(m.fake.accounts) == [account]  # resumed, not created again
    links = [params for _, path, params in m.fake.requests if path == "/v1/account_links"]
    assert [(p["return_url"], p["refresh_url"]) for p in links] == [("https://example.com/back",) * 2] * 2
    for change, status in (
        (None, "pending_onboarding"),
        (m.fake.complete_onboarding, "active"),
        (m.fake.restrict, "restricted"),
    ):
        if change is not None:
            change(account)
        answer = await m.payouts.status("u-b")
        assert answer["status"] == status
        assert ("dashboardUrl" in answer) == (status == "active")
        assert (await m.store.users.find_one({"_id": "u-b"}))["payout"]["status"] == status
    with pytest.raises(NotFound) as raised:
        await m.payouts.onboard("u-none", OnboardBody(returnUrl="https://example.com/back"))
    assert raised.value.message == "User not found"
    with pytest.raises(NotFound):
        await m.payouts.status("u-none")


async def test_reading_the_payout_status_never_moves_money(m: Money) -> None:
    await held(m, 1000)
    await m.activate("u-b")  # reads the status, now active
    assert m.fake.transfers == {}


async def test_onboarding_without_connect_says_what_to_enable(m: Money) -> None:
    await m.user("u-b")
    m.fake.connect_enabled = False
    with pytest.raises(Unprocessable) as raised:
        await m.payouts.onboard("u-b", OnboardBody(returnUrl="https://example.com/back"))
    assert raised.value.message == (
        "Payouts are not enabled on the platform's payment account (Connect enrollment is required)"
    )
    assert raised.value.extra == {
        "code": "connect_enrollment_required",
        "dashboardUrl": "https://dashboard.stripe.com/connect",
    }
    assert "payout" not in await m.store.users.find_one({"_id": "u-b"})


# ---- the webhook --------------------------------------------------------------------------------


class Handler:
    """The subscription handler (the org plans in the app), recording what it is given."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.fail = False

    async def __call__(self, event: Any) -> None:
        if self.fail:
            raise RuntimeError("the handler failed")
        self.events.append(event.type)


def service(m: Money, handler: Handler) -> Payouts:
    return Payouts(m.store, m.services.accounts, m.charges, m.charges.provider, handler)


async def deliver(
    payouts: Payouts, m: Money, kind: str, obj: dict[str, Any], event_id: str
) -> dict[str, Any]:
    """An event about a provider object (checked against the provider's API description)."""
    payload = m.fake.event(kind, obj, event_id)
    return await payouts.webhook(payload, m.fake.sign(payload))


async def deliver_raw(payouts: Payouts, m: Money, kind: str, event_id: str) -> dict[str, Any]:
    """An event whose object only the subscription handler reads (not checked: it is a stand-in)."""
    obj = {"id": "sub_1", "object": "subscription", "status": "active", "metadata": {}}
    payload = json.dumps({"id": event_id, "object": "event", "type": kind, "data": {"object": obj}}).encode()
    return await payouts.webhook(payload, m.fake.sign(payload))


async def test_events_are_routed_to_what_they_are_about(m: Money) -> None:
    handler = Handler()
    payouts = service(m, handler)
    [doc] = await held(m, 1000)
    # A pending charge: its settlement arrives as an event.
    await m.template("t-u-b", {"kind": "user", "id": "u-b"})
    await m.install("i-p", "t-u-b", deployer="u-dp")
    m.fake.intent_answer_override = {"status": "processing"}
    request = {"installId": "i-p", "amountCents": 500, "periodStart": iso(T0), "periodEnd": iso(APR)}
    with pytest.raises(Conflict):
        await m.charges.charge_cycle(
            Principal(via="key", user_id="x"), ChargeCycleBody.model_validate(request)
        )
    m.fake.intent_answer_override = {}
    pending = await m.invoice("i-p")
    intent = m.fake.payment_intents[pending["paymentIntentId"]]
    assert await deliver(payouts, m, "payment_intent.payment_failed", intent, "evt_1") == {"received": True}
    assert (await m.invoice("i-p"))["status"] == "failed"
    assert await deliver(payouts, m, "payment_intent.succeeded", intent, "evt_2") == {"received": True}
    assert (await m.invoice("i-p"))["status"] == "paid"
    # The builder's account becomes active: the held share is paid out, a declined one requeued
    # (another builder's held share waits for their own account's event).
    [other] = await held(m, 700, builder="u-c")
    await m.activate("u-c")
    await m.store["invoices"].update_one({"_id": pending["_id"]}, {"$set": {"payout": "declined"}})
    link = await m.payouts.onboard("u-b", OnboardBody(returnUrl="https://example.com/back"))
    account = link["url"].split("/connect/setup/")[1].split("/")[0]
    await deliver(payouts, m, "account.updated", m.fake.accounts[account], "evt_3")
    assert (await m.store.users.find_one({"_id": "u-b"}))["payout"]["status"] == "pending_onboarding"
    assert m.fake.transfers == {} and (await invoice(m, pending["_id"]))["payout"] == "declined"
    # An account no user has (created elsewhere on the platform): nothing to pay.
    stranger = await m.charges.require_provider().create_payout_account("x@example.com", "u-x")
    m.fake.complete_onboarding(stranger)
    await deliver(payouts, m, "account.updated", m.fake.accounts[stranger], "evt_x")
    assert m.fake.transfers == {}
    m.fake.complete_onboarding(account)
    await deliver(payouts, m, "account.updated", m.fake.accounts[account], "evt_4")
    assert (await m.store.users.find_one({"_id": "u-b"}))["payout"]["status"] == "active"
    assert sorted(t["metadata"]["invoiceId"] for t in m.fake.transfers.values()) == sorted(
        [doc["_id"], pending["_id"]]
    )
    assert (await invoice(m, pending["_id"]))["transferRequeues"] == 1
    assert (await invoice(m, other["_id"]))["payout"] == "held"
    # A reversal of a transfer we sent.
    transfer = next(t for t in m.fake.transfers.values() if t["metadata"]["invoiceId"] == doc["_id"])
    transfer.update(reversed=True, amount_reversed=transfer["amount"])
    await deliver(payouts, m, "transfer.reversed", transfer, "evt_5")
    assert (await invoice(m, doc["_id"]))["payout"] == "reversed"
    # Subscriptions go to the handler; anything else is ignored.
    assert handler.events == []
    for n, kind in enumerate(
        ("customer.subscription.updated", "checkout.session.completed", "charge.refunded")
    ):
        await deliver_raw(payouts, m, kind, f"evt_s{n}")
    assert handler.events == ["customer.subscription.updated", "checkout.session.completed"]
    done = await m.store["payment_events"].find({}).to_list(20)
    assert {d["status"] for d in done} == {"done"} and len(done) == 9
    assert all(d["doneAt"] >= d["claimedAt"] for d in done)


async def test_an_event_is_applied_once(m: Money) -> None:
    handler = Handler()
    payouts = service(m, handler)
    now = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)  # forwards only
    kind = "customer.subscription.updated"
    with time_machine.travel(now, tick=False):
        for _ in range(2):  # a redelivery of an applied event changes nothing
            assert await deliver_raw(payouts, m, kind, "evt_a") == {"received": True}
        assert handler.events == ["customer.subscription.updated"]
        record = await m.store["payment_events"].find_one({"_id": "evt_a"})
        assert (record["type"], record["claimedAt"], record["receivedAt"], record["doneAt"]) == (
            kind,
            now,
            now,
            now,
        )
        # Claimed by another delivery that is still applying it (within the lease): come back later.
        claims = [
            ("evt_b", now - timedelta(minutes=5)),
            ("evt_c", now - timedelta(minutes=5, milliseconds=1)),
        ]
        await m.store["payment_events"].insert_many(
            [{"_id": i, "type": "x", "status": "applying", "claimedAt": at} for i, at in claims]
            + [{"_id": "evt_d", "type": "x"}]  # a record from before statuses: applied
        )
        with pytest.raises(Conflict) as raised:
            await deliver_raw(payouts, m, kind, "evt_b")
        assert raised.value.message == "This event is being processed; deliver it again later"
        # A claim older than the lease was left by a process that died: taken over and applied.
        assert await deliver_raw(payouts, m, kind, "evt_c") == {"received": True}
        assert await deliver_raw(payouts, m, kind, "evt_d") == {"received": True}
        assert len(handler.events) == 2
        taken = await m.store["payment_events"].find_one({"_id": "evt_c"})
        assert (taken["status"], taken["claimedAt"]) == ("done", now)
        # An apply that fails drops its claim, so the next delivery applies it.
        handler.fail = True
        with pytest.raises(RuntimeError):
            await deliver_raw(payouts, m, kind, "evt_e")
        assert await m.store["payment_events"].find_one({"_id": "evt_e"}) is None
        handler.fail = False
        await deliver_raw(payouts, m, kind, "evt_e")
        assert len(handler.events) == 3


async def test_a_rate_limited_transfer_goes_back_to_held(m: Money) -> None:
    [doc] = await held(m, 1000)
    await m.activate("u-b")
    m.fake.rate_limit_transfers = True
    assert await m.charges.pay_out_held() == 0
    back = await invoice(m, doc["_id"])
    assert back["payout"] == "held" and "payoutFailure" not in back
    m.fake.rate_limit_transfers = False
    assert await m.charges.pay_out_held() == 1  # at once, with the same key
    assert m.transfer_keys() == [f"svc-payout:{doc['_id']}"] * 2


async def test_each_due_invoice_is_tried_whatever_became_of_the_one_before(m: Money) -> None:
    """A refusal or a failure of one transfer does not stop the others of the run."""
    await held(m, 1000, 2000)
    await m.activate("u-b")
    m.fake.fail_transfers = True
    assert await m.charges.pay_out_held() == 0
    assert await m.store["invoices"].count_documents({"payout": "declined"}) == 2
    await m.charges.builders.requeue_declined("u-b")
    m.fake.fail_transfers, m.fake.transfers_down = False, True
    assert await m.charges.pay_out_held() == 0
    assert await m.store["invoices"].count_documents({"payout": "transferring"}) == 2
