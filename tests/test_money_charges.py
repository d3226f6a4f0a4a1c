"""The charge itself (svc/billing/charges.py) as fast tables: no app, no Ray.

The billing services are built through the composition root over the embedded database and
the fake payment provider's HTTP server (tests/support/money.py); the charge-cycle routes'
own tests go through the app. This is the fast test `make mutate` runs against `Charges`
(docs/testing.md): amounts, the fee split, who is paid, the period's boundaries, idempotency
keys, a declined / refused / unknown outcome and what each leaves on the invoice.
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import time_machine

from svc.billing import ChargeCycleBody, Charges
from svc.billing.charges import previous_month
from svc.core import BadGateway, BadRequest, Conflict, Forbidden, NotFound, PaymentRequired, Unavailable
from svc.identity import Principal
from tests.support.billing import CARD
from tests.support.money import T0, Money, money_world

DEPLOYER = Principal(via="key", user_id="u-dep")
MAR, APR, MAY = T0, datetime(2025, 4, 1, tzinfo=UTC), datetime(2025, 5, 1, tzinfo=UTC)
KEY_MAR = "svc-charge:i1:2025-03-01T00:00:00.000Z:2025-04-01T00:00:00.000Z"


@pytest.fixture
async def m(store: Any, make_settings: Any, aiohttp_server: Any) -> Money:
    return await money_world(store, make_settings, aiohttp_server)


def body(
    amount: int = 1000, start: datetime | None = MAR, end: datetime | None = APR, **extra: Any
) -> ChargeCycleBody:
    values: dict[str, Any] = {"installId": "i1", "amountCents": amount, **extra}
    if start is not None:
        values["periodStart"] = start.isoformat()
    if end is not None:
        values["periodEnd"] = end.isoformat()
    return ChargeCycleBody.model_validate(values)


async def deal(m: Money, *, active: bool = True, **template: Any) -> str | None:
    """Builder u-b (payout account active or not), template t1 of theirs, install i1 with a card."""
    account = await m.builder("u-b", active=active)
    await m.template("t1", {"kind": "user", "id": "u-b"}, **template)
    await m.install("i1", "t1")
    return account


async def timeline(m: Money, action: str) -> list[dict[str, Any]]:
    query = {"kind": "billing", "action": action, "installId": "i1"}
    return [doc["meta"] async for doc in m.store["timeline"].find(query)]


INVOICE_FIELDS = {
    "_id", "installId", "templateId", "builderUserId", "payoutAccountId", "payout", "deployer", "periodStart",
    "periodEnd", "amountCents", "feeCents", "builderAmountCents", "status", "attempt", "claim", "claimedAt",
    "attemptStartedAt", "source", "createdAt", "updatedAt",
}  # fmt: skip


async def failures(m: Money) -> dict[str, float]:
    return {
        doc["labels"]["reason"]: doc["value"]
        async for doc in m.store["metric_counters"].find({"name": "payment_failures"})
    }


def test_previous_month_is_the_last_whole_utc_month() -> None:
    def at(*args: int, tz: timezone = UTC) -> datetime:
        return datetime(*args, tzinfo=tz)

    cases = [
        (at(2026, 3, 15, 12), at(2026, 2, 1), at(2026, 3, 1)),
        (at(2026, 1, 1), at(2025, 12, 1), at(2026, 1, 1)),
        (at(2026, 3, 31, 23, 59, 59, 999999), at(2026, 2, 1), at(2026, 3, 1)),
        # 00:30 on 1 March at UTC+2 is still February in UTC.
        (at(2026, 3, 1, 0, 30, tz=timezone(timedelta(hours=2))), at(2026, 1, 1), at(2026, 2, 1)),
    ]
    for now, start, end in cases:
        assert previous_month(now) == (start, end), now
        assert previous_month(now)[0].utcoffset() == timedelta(0)


def test_previous_month_is_in_utc_whatever_the_local_zone() -> None:
    zone = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Tokyo"
    time.tzset()
    try:
        now = datetime(2026, 3, 1, 0, 30, tzinfo=timezone(timedelta(hours=2)))
        assert previous_month(now) == (datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 2, 1, tzinfo=UTC))
    finally:
        if zone is None:
            os.environ.pop("TZ")
        else:
            os.environ["TZ"] = zone
        time.tzset()


async def test_a_charge_routes_the_builder_share_with_the_fee_kept(m: Money) -> None:
    account = await deal(m)
    answer = await m.charges.charge_cycle(DEPLOYER, body(1234))
    invoice = await m.invoice("i1")
    assert answer == {
        "invoiceId": invoice["_id"],
        "paymentIntentId": invoice["paymentIntentId"],
        "status": "succeeded",
        "amountCents": 1234,
    }
    assert invoice["_id"].startswith("inv_")
    assert {
        k: invoice[k] for k in ("installId", "templateId", "builderUserId", "payoutAccountId", "payout")
    } == {
        "installId": "i1",
        "templateId": "t1",
        "builderUserId": "u-b",
        "payoutAccountId": account,
        "payout": "routed",
    }
    assert (invoice["amountCents"], invoice["feeCents"], invoice["builderAmountCents"]) == (1234, 123, 1111)
    assert (invoice["periodStart"], invoice["periodEnd"]) == (MAR, APR)
    assert (invoice["status"], invoice["attempt"], invoice["source"]) == ("paid", 1, "charge_cycle")
    assert invoice["deployer"] == {"kind": "user", "id": "u-dep"}
    assert set(invoice) == INVOICE_FIELDS | {"paymentIntentId", "paidAt"}
    assert invoice["updatedAt"] >= invoice["paidAt"] >= invoice["createdAt"]
    intent = m.fake.payment_intents[invoice["paymentIntentId"]]
    assert (intent["amount"], intent["application_fee_amount"]) == (1234, 123)
    assert intent["transfer_data"] == {"destination": account}
    assert intent["customer"] == (await m.store.installs.find_one({"_id": "i1"}))["payCustomerId"]
    assert intent["payment_method"] == CARD
    assert intent["metadata"] == {"invoiceId": invoice["_id"], "installId": "i1", "attempt": "1"}
    assert intent["description"] == "Name t1 usage 2025-03-01T00:00:00.000Z to 2025-04-01T00:00:00.000Z"
    assert m.charge_keys() == [f"{KEY_MAR}:1"]
    assert await timeline(m, "billing.charged") == [
        {"invoiceId": invoice["_id"], "amountCents": 1234, "source": "charge_cycle"}
    ]


async def test_without_an_active_payout_account_the_share_is_held(m: Money) -> None:
    await deal(m, active=False)
    await m.store.users.update_one(
        {"_id": "u-b"}, {"$set": {"payout": {"accountId": "acct_x", "status": "restricted"}}}
    )
    await m.charges.charge_cycle(DEPLOYER, body(1000))
    invoice = await m.invoice("i1")
    assert (invoice["builderUserId"], invoice["payoutAccountId"], invoice["payout"]) == ("u-b", None, "held")
    assert (invoice["feeCents"], invoice["builderAmountCents"]) == (100, 900)
    intent = m.fake.payment_intents[invoice["paymentIntentId"]]
    assert intent["application_fee_amount"] is None and intent["transfer_data"] is None


async def test_who_is_paid(m: Money) -> None:
    """An org's template pays the org's owner; no owner (or a missing org) pays nobody."""
    account = await m.builder("u-b")
    await m.builder("u-other")
    await m.store.orgs.insert_many(
        [{"_id": "o1", "slug": "o1", "ownerId": "u-b"}, {"_id": "o2", "slug": "o2"}]
    )
    cases = [
        ({"kind": "org", "id": "o1"}, ("u-b", account, "routed")),
        ({"kind": "org", "id": "o-missing"}, (None, None, "held")),
        ({"kind": "org", "id": "o2"}, (None, None, "held")),
        ({"kind": "user", "id": "u-gone"}, ("u-gone", None, "held")),
        ({"kind": "group", "id": "u-b"}, (None, None, "held")),
        (None, (None, None, "held")),
    ]
    for n, (owner, expected) in enumerate(cases):
        await m.template(f"t{n}", owner)
        await m.install(f"i{n}", f"t{n}", deployer=f"u-d{n}")
        outcome = await m.charges.charge(
            await m.store.installs.find_one({"_id": f"i{n}"}), MAR, APR, 500, "x", wait=False
        )
        invoice = outcome.invoice
        assert (invoice["builderUserId"], invoice["payoutAccountId"], invoice["payout"]) == expected, owner


async def test_a_second_call_for_the_period_answers_already_paid(m: Money) -> None:
    await deal(m)
    first = await m.charges.charge_cycle(DEPLOYER, body())
    assert await m.charges.charge_cycle(DEPLOYER, body()) == {
        "status": "already_paid",
        "invoiceId": first["invoiceId"],
    }
    assert len(m.fake.succeeded_charges()) == 1 and m.charge_keys() == [f"{KEY_MAR}:1"]


async def test_two_racing_calls_charge_once(m: Money) -> None:
    await deal(m)
    answers = await asyncio.gather(*(m.charges.charge_cycle(DEPLOYER, body()) for _ in range(2)))
    assert sorted(a["status"] for a in answers) == ["already_paid", "succeeded"]
    assert len({a["invoiceId"] for a in answers}) == 1 and len(m.fake.succeeded_charges()) == 1


async def test_charge_cycle_refusals(m: Money) -> None:
    await deal(m)
    await m.template("t-free", {"kind": "user", "id": "u-b"}, model="free", price=None)
    await m.install("i-free", "t-free")
    await m.store["templates"].insert_one({"_id": "t-bare", "kind": "template"})
    await m.install("i-bare", "t-bare")
    await m.install("i-pending", "t1", status="pending")
    await m.install("i-nocard", "t1", card=None)
    await m.install("i-nomethod", "t1", card=None, payCustomerId="cus_x")
    await m.install("i-nocustomer", "t1", card=None, payPaymentMethodId=CARD)
    scoped = Principal(via="key", user_id="u-dep", install_id="i9")
    cases: list[tuple[Principal, ChargeCycleBody, type[Exception], str]] = [
        (scoped, body(), Forbidden, "This key is scoped to install i9"),
        (DEPLOYER, body(end=None), BadRequest, "periodStart and periodEnd go together: send both or neither"),
        (
            DEPLOYER,
            body(start=None),
            BadRequest,
            "periodStart and periodEnd go together: send both or neither",
        ),
        (DEPLOYER, body(start=APR, end=APR), BadRequest, "periodStart must be before periodEnd"),
        (DEPLOYER, body(start=MAY, end=APR), BadRequest, "periodStart must be before periodEnd"),
        (DEPLOYER, body(installId="i-none"), NotFound, "Install not found"),
        (DEPLOYER, body(installId="i-pending"), NotFound, "Install not found"),
        (
            DEPLOYER,
            body(installId="i-free"),
            Conflict,
            "The install's template is free; there is nothing to charge",
        ),
        (
            DEPLOYER,
            body(installId="i-bare"),
            Conflict,
            "The install's template is free; there is nothing to charge",
        ),
    ]
    no_card = "The install has no saved payment method (payCustomerId and payPaymentMethodId)"
    for install in ("i-nocard", "i-nomethod", "i-nocustomer"):
        cases.append((DEPLOYER, body(installId=install), Conflict, no_card))
    for principal, request, error, message in cases:
        with pytest.raises(error) as raised:
            await m.charges.charge_cycle(principal, request)
        assert raised.value.message == message, request
    assert m.charge_keys() == [] and await m.store["invoices"].count_documents({}) == 0
    # A key scoped to the install itself may charge it.
    own = Principal(via="key", user_id="u-dep", install_id="i1")
    assert (await m.charges.charge_cycle(own, body()))["status"] == "succeeded"


async def test_the_period_may_end_now_give_or_take_a_second(m: Money) -> None:
    await deal(m)
    now = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)  # forwards only (docs/testing.md)
    with time_machine.travel(now, tick=False):
        with pytest.raises(BadRequest) as raised:
            await m.charges.charge_cycle(
                DEPLOYER, body(start=now, end=now + timedelta(seconds=1, milliseconds=1))
            )
        assert raised.value.message == "periodEnd must not be in the future"
        answer = await m.charges.charge_cycle(DEPLOYER, body(start=now, end=now + timedelta(seconds=1)))
    assert answer["status"] == "succeeded"


async def test_without_a_period_the_previous_month_is_charged(m: Money) -> None:
    await deal(m)
    with time_machine.travel(datetime(2027, 3, 15, 12, tzinfo=UTC), tick=True):
        await m.charges.charge_cycle(DEPLOYER, body(start=None, end=None))
    invoice = await m.invoice("i1")
    assert (invoice["periodStart"], invoice["periodEnd"]) == (
        datetime(2027, 2, 1, tzinfo=UTC),
        datetime(2027, 3, 1, tzinfo=UTC),
    )


async def test_without_a_provider_every_money_path_answers_503(m: Money) -> None:
    await deal(m)
    charges = Charges(m.store, m.services.mailer, None, m.services.installs)
    install = await m.store.installs.find_one({"_id": "i1"})
    calls = [
        charges.charge_cycle(DEPLOYER, body()),
        charges.charge(install, MAR, APR, 1000, "x", wait=False),
        charges.cancel_install("u-dep", "i1"),
        charges.run_cycle(APR, APR),
        charges.pay_out_held(),
        charges.earnings("u-b"),
    ]
    for call in calls:
        with pytest.raises(Unavailable) as raised:
            await call
        assert raised.value.message == "Payments are not configured"
    assert m.charge_keys() == [] and await m.store["invoices"].count_documents({}) == 0


async def test_a_declined_card_fails_the_attempt_and_the_next_call_retries_with_a_new_key(m: Money) -> None:
    await deal(m)
    m.fake.declined_methods.add(CARD)
    with pytest.raises(PaymentRequired) as raised:
        await m.charges.charge_cycle(DEPLOYER, body(1000))
    assert raised.value.message == "The payment was declined: Your card was declined."
    assert raised.value.extra == {"code": "payment_declined"}
    failed = await m.invoice("i1")
    assert (failed["status"], failed["failure"], failed["attempt"]) == (
        "failed",
        "Your card was declined.",
        1,
    )
    assert set(failed) == INVOICE_FIELDS | {"failure", "attempts"}
    assert [set(a) for a in failed["attempts"]] == [{"attempt", "code", "error", "at"}]
    assert [(a["attempt"], a["code"], a["error"]) for a in failed["attempts"]] == [
        (1, "card_declined", "Your card was declined.")
    ]
    assert await failures(m) == {"declined": 1}
    assert await timeline(m, "billing.charge_failed") == [
        {
            "invoiceId": failed["_id"],
            "attempt": 1,
            "code": "card_declined",
            "error": "Your card was declined.",
        }
    ]
    m.fake.declined_methods.clear()
    answer = await m.charges.charge_cycle(DEPLOYER, body(2000))  # the amount of the retry is charged
    paid = await m.invoice("i1")
    assert answer["status"] == "succeeded" and paid["_id"] == failed["_id"]
    assert (paid["status"], paid["attempt"], "failure" in paid) == ("paid", 2, False)
    assert (paid["amountCents"], paid["feeCents"], paid["builderAmountCents"]) == (2000, 200, 1800)
    assert paid["attemptStartedAt"] > failed["attemptStartedAt"]
    assert m.charge_keys() == [f"{KEY_MAR}:1", f"{KEY_MAR}:2"]
    assert m.fake.payment_intents[paid["paymentIntentId"]]["metadata"]["attempt"] == "2"


async def test_a_refused_request_releases_the_claim(m: Money) -> None:
    await deal(m)
    cases = [
        ("invalid_request", BadGateway, "payment_method_unexpected_state"),
        ("rate_limited", Unavailable, "rate_limit"),
    ]
    for attempt, (switch, error, code) in enumerate(cases, start=1):
        m.fake.charge_error = switch
        with pytest.raises(error) as raised:
            await m.charges.charge_cycle(DEPLOYER, body())
        invoice = await m.invoice("i1")
        assert (invoice["status"], invoice["attempt"], invoice["attempts"][-1]["code"]) == (
            "failed",
            attempt,
            code,
        )
        assert invoice["failure"] in raised.value.message
        assert raised.value.message.endswith("; try again shortly") == (error is Unavailable)
    assert await failures(m) == {"refused": 2}
    m.fake.charge_error = None
    await m.charges.charge_cycle(DEPLOYER, body())
    assert (await m.invoice("i1"))["attempt"] == 3
    assert m.charge_keys()[-1] == f"{KEY_MAR}:3"


async def test_an_unknown_outcome_is_resumed_with_the_same_key_after_the_lease(m: Money) -> None:
    await deal(m)
    m.fake.drop_charge_answers = 10  # charged, then every answer (and the SDK's retries) lost
    with pytest.raises(BadGateway):
        await m.charges.charge_cycle(DEPLOYER, body())
    invoice = await m.invoice("i1")
    assert (invoice["status"], invoice["attempt"]) == ("processing", 1)
    assert await failures(m) == {} and len(m.fake.succeeded_charges()) == 1
    m.fake.drop_charge_answers = 0
    install = await m.store.installs.find_one({"_id": "i1"})
    lease_end = invoice["claimedAt"] + timedelta(minutes=5)
    with pytest.raises(Conflict) as raised:  # the claim is still held
        await m.charges.charge(
            install, MAR, APR, 1000, "x", wait=False, now=lease_end - timedelta(milliseconds=1)
        )
    assert raised.value.message == "A charge for this install and period is in progress; try again shortly"
    outcome = await m.charges.charge(install, MAR, APR, 1000, "x", wait=False, now=lease_end)
    assert outcome.charged_now and outcome.invoice["attempt"] == 1 and outcome.invoice["status"] == "paid"
    assert set(m.charge_keys()) == {f"{KEY_MAR}:1"}
    assert len(m.fake.succeeded_charges()) == 1  # the same payment, replayed
    assert outcome.invoice["paymentIntentId"] == m.fake.succeeded_charges()[0]["id"]
    again = await m.charges.charge(install, MAR, APR, 1000, "x", wait=False)
    assert not again.charged_now and again.invoice["_id"] == invoice["_id"]


async def test_an_unknown_outcome_older_than_the_key_is_left_to_an_operator(m: Money) -> None:
    await deal(m)
    await unknown_outcome(m, body())
    invoice = await m.invoice("i1")
    install = await m.store.installs.find_one({"_id": "i1"})
    key_end = invoice["attemptStartedAt"] + timedelta(hours=23)
    with pytest.raises(Conflict) as raised:
        await m.charges.charge(install, MAR, APR, 1000, "x", wait=False, now=key_end)
    assert raised.value.message == (
        f"Invoice {invoice['_id']} has had an unknown outcome for over a day; "
        "an operator must check it with the payment provider"
    )
    with pytest.raises(BadGateway):  # just within the key's lifetime: tried again, with its key
        await m.charges.charge(
            install, MAR, APR, 1000, "x", wait=False, now=key_end - timedelta(milliseconds=1)
        )
    assert m.charge_keys() == [f"{KEY_MAR}:1", f"{KEY_MAR}:1"]
    assert len(m.fake.payment_intents) == 1


async def unknown_outcome(m: Money, request: ChargeCycleBody) -> None:
    """A charge whose answer does not match the request: its outcome is unknown, the invoice stays
    `processing` (quicker than a provider failure, which the SDK retries with back-off). The
    provider replays that answer for the same key."""
    m.fake.intent_answer_override = {"amount": 1}
    with pytest.raises(BadGateway):
        await m.charges.charge_cycle(DEPLOYER, request)
    m.fake.intent_answer_override = {}
    m.fake.violations.clear()  # the mismatched answer is the point


async def test_an_answer_that_does_not_match_keeps_the_invoice_processing(m: Money) -> None:
    await deal(m)
    m.fake.intent_answer_override = {"amount": 999}
    with pytest.raises(BadGateway) as raised:
        await m.charges.charge_cycle(DEPLOYER, body())
    assert raised.value.message == "The payment provider's answer did not match the request"
    invoice = await m.invoice("i1")
    assert (invoice["status"], "paymentIntentId" in invoice) == ("processing", False)
    m.fake.violations.clear()  # the mismatched answer is the point here


async def test_a_pending_payment_is_settled_by_the_provider_event(m: Money) -> None:
    await deal(m)
    m.fake.intent_answer_override = {"status": "processing"}
    with pytest.raises(Conflict) as raised:
        await m.charges.charge_cycle(DEPLOYER, body())
    assert (
        raised.value.message
        == "The payment is processing; the invoice is settled when the provider confirms it"
    )
    invoice = await m.invoice("i1")
    intent = next(iter(m.fake.payment_intents.values()))
    assert (invoice["status"], invoice["paymentIntentId"]) == ("processing", intent["id"])
    assert set(invoice) == INVOICE_FIELDS | {"paymentIntentId"}
    await m.charges.payment_settled(intent, True)
    settled = await m.invoice("i1")
    assert (settled["status"], settled["paymentIntentId"]) == ("paid", intent["id"]) and settled["paidAt"]


async def test_overlapping_periods_are_never_billed_twice(m: Money) -> None:
    await deal(m)
    await m.install("i2", "t1", deployer="u-d2")
    await m.charges.charge_cycle(DEPLOYER, body(start=MAR, end=APR))
    paid = await m.invoice("i1")
    mid_mar, mid_apr = MAR + timedelta(days=14), APR + timedelta(days=14)
    for start, end in (
        (mid_mar, mid_apr),
        (MAR - timedelta(days=1), MAR + timedelta(seconds=1)),
        (mid_mar, mid_mar + timedelta(days=1)),
    ):
        with pytest.raises(Conflict) as raised:
            await m.charges.charge_cycle(DEPLOYER, body(start=start, end=end))
        assert raised.value.message == (
            f"The period overlaps invoice {paid['_id']} (2025-03-01T00:00:00.000Z to "
            "2025-04-01T00:00:00.000Z), which already bills this usage"
        )
        assert raised.value.extra == {"invoiceId": paid["_id"]}
        assert await m.store["invoices"].count_documents({}) == 1  # the refused invoice is removed
    # Periods that only touch it, and another install's same period, are billed.
    for start, end in ((APR, MAY), (MAR - timedelta(days=28), MAR)):
        assert (await m.charges.charge_cycle(DEPLOYER, body(start=start, end=end)))["status"] == "succeeded"
    assert (await m.charges.charge_cycle(DEPLOYER, body(installId="i2")))["status"] == "succeeded"


async def test_racing_calls_for_an_overlapping_period_are_all_refused(m: Money) -> None:
    """One caller inserts the period's invoice, finds the overlap and deletes it again; the
    others, whose insert hit that invoice, find it gone and start over (`_claim`'s retry): each
    must end in the same overlap refusal, with nothing charged and nothing left behind."""
    await deal(m)
    await m.charges.charge_cycle(DEPLOYER, body(start=MAR, end=APR))
    paid = await m.invoice("i1")
    mid_mar, mid_apr = MAR + timedelta(days=14), APR + timedelta(days=14)
    answers = await asyncio.gather(
        *(m.charges.charge_cycle(DEPLOYER, body(start=mid_mar, end=mid_apr)) for _ in range(4)),
        return_exceptions=True,
    )
    for answer in answers:
        assert isinstance(answer, Conflict), answer
        assert answer.extra == {"invoiceId": paid["_id"]}
        assert answer.message.startswith(f"The period overlaps invoice {paid['_id']} ")
    assert [doc["_id"] async for doc in m.store["invoices"].find({})] == [paid["_id"]]
    assert len(m.fake.succeeded_charges()) == 1


async def test_a_retry_is_refused_when_another_invoice_billed_the_period_since(m: Money) -> None:
    await deal(m)
    m.fake.declined_methods.add(CARD)
    with pytest.raises(PaymentRequired):
        await m.charges.charge_cycle(DEPLOYER, body(start=MAR, end=APR))
    m.fake.declined_methods.clear()
    # A failed invoice bills nothing: an overlapping period may be charged meanwhile.
    mid = MAR + timedelta(days=14)
    later = await m.charges.charge_cycle(DEPLOYER, body(start=mid, end=mid + timedelta(days=30)))
    with pytest.raises(Conflict) as raised:
        await m.charges.charge_cycle(DEPLOYER, body(start=MAR, end=APR))
    assert raised.value.extra == {"invoiceId": later["invoiceId"]}
    failed = await m.store["invoices"].find_one({"periodStart": MAR})
    assert (failed["status"], failed["attempt"]) == ("failed", 1)  # kept, not removed


async def test_an_unsettled_invoice_blocks_an_overlapping_one(m: Money) -> None:
    await deal(m)
    await unknown_outcome(m, body(start=MAR, end=APR))
    with pytest.raises(Conflict):
        await m.charges.charge_cycle(DEPLOYER, body(start=MAR + timedelta(days=1), end=APR))


async def test_billed_until_is_the_end_of_the_last_paid_or_settling_period(m: Money) -> None:
    await deal(m)
    install = await m.store.installs.find_one({"_id": "i1"})
    assert await m.charges.billed_until(install) == T0  # nothing billed: its creation
    # Invoices written straight into the store: only their status and period are read.
    june, july = datetime(2025, 6, 1, tzinfo=UTC), datetime(2025, 7, 1, tzinfo=UTC)
    seeds = [
        ("a", "paid", MAR, APR),
        ("c", "processing", MAY, june),
        ("b", "paid", APR, MAY),
        ("d", "failed", june, july),
    ]
    await m.store["invoices"].insert_many(
        [{"_id": n, "installId": "i1", "status": s, "periodStart": a, "periodEnd": b} for n, s, a, b in seeds]
        + [{"_id": "other", "installId": "i2", "status": "paid", "periodStart": june, "periodEnd": july}]
    )
    assert await m.charges.billed_until(install) == june
    await m.store["invoices"].delete_one({"_id": "c"})
    assert await m.charges.billed_until(install) == MAY


async def test_payment_events_settle_only_the_attempt_they_name(m: Money) -> None:
    """payment_settled as a table: (invoice status, event metadata, succeeded) → status after."""
    await deal(m)
    base = {"installId": "i1", "attempt": 2, "periodStart": MAR, "periodEnd": APR}
    cases: list[tuple[str, dict[str, Any], bool, str]] = [
        ("processing", {"invoiceId": "inv", "attempt": "2"}, True, "paid"),
        ("failed", {"invoiceId": "inv", "attempt": "2"}, True, "paid"),
        ("processing", {"invoiceId": "inv", "attempt": "2"}, False, "failed"),
        ("paid", {"invoiceId": "inv", "attempt": "2"}, False, "paid"),
        ("processing", {"invoiceId": "inv", "attempt": "1"}, True, "processing"),
        ("processing", {"invoiceId": "inv", "attempt": "x"}, True, "processing"),
        ("processing", {"invoiceId": "inv"}, True, "processing"),
        ("processing", {"attempt": "2"}, True, "processing"),
        ("processing", {"invoiceId": "", "attempt": "2"}, True, "processing"),
    ]
    for status, metadata, succeeded, after in cases:
        await m.store["invoices"].delete_many({})
        await m.store["invoices"].insert_one({"_id": "inv", "status": status, **base})
        await m.charges.payment_settled({"id": "pi_1", "metadata": metadata}, succeeded)
        invoice = await m.store["invoices"].find_one({"_id": "inv"})
        assert invoice["status"] == after, (status, metadata, succeeded)
        if after != status:
            assert "updatedAt" in invoice
        if after == "paid" and status != "paid":
            assert invoice["paymentIntentId"] == "pi_1" and "paidAt" in invoice
        if after == "failed":
            assert invoice["failure"] == "payment failed (provider event)"
    await m.charges.payment_settled({"id": "pi_1"}, False)  # no metadata at all
    assert await failures(m) == {"provider_event": 1}


async def test_an_invoice_keeps_its_last_twenty_attempts(m: Money) -> None:
    await deal(m)
    m.fake.declined_methods.add(CARD)
    for _ in range(21):
        with pytest.raises(PaymentRequired):
            await m.charges.charge_cycle(DEPLOYER, body())
    attempts = (await m.invoice("i1"))["attempts"]
    assert [a["attempt"] for a in attempts] == list(range(2, 22))


async def test_two_callers_resuming_one_stale_charge_take_it_over_once(m: Money) -> None:
    await deal(m)
    await unknown_outcome(m, body())
    m.fake.idempotent.clear()  # as if that request had never reached the provider
    install = await m.store.installs.find_one({"_id": "i1"})
    after = (await m.invoice("i1"))["claimedAt"] + timedelta(minutes=6)
    # Five at once, so that some read the stale claim before any takes it: those that lose the
    # take-over read the invoice again (and find the winner's fresh claim). Five connections
    # are opened first, or the caller with the one open connection runs ahead of the others.
    await asyncio.gather(*(m.store.installs.find_one({"_id": "i1"}) for _ in range(5)))
    answers = await asyncio.gather(
        *(m.charges.charge(install, MAR, APR, 1000, "x", wait=False, now=after) for _ in range(5)),
        return_exceptions=True,
    )
    # One takes the claim and charges; the others find it claimed (409) or already paid.
    charged = [a for a in answers if not isinstance(a, BaseException) and a.charged_now]
    others = [
        a
        for a in answers
        if isinstance(a, Conflict) or (not isinstance(a, BaseException) and not a.charged_now)
    ]
    assert (len(charged), len(others)) == (1, 4), answers


async def test_a_failed_invoice_is_retried_under_a_fresh_claim(m: Money) -> None:
    """The retry of a declined attempt takes the invoice back to `processing` under its own
    claim, time and attempt: a caller right behind it finds the claim held, not stale."""
    await deal(m)
    m.fake.declined_methods.add(CARD)
    with pytest.raises(PaymentRequired):
        await m.charges.charge_cycle(DEPLOYER, body(1000))
    m.fake.declined_methods.clear()
    failed = await m.invoice("i1")
    install = await m.store.installs.find_one({"_id": "i1"})
    later = (datetime.now(UTC) + timedelta(minutes=10)).replace(microsecond=0)  # past the lease
    with time_machine.travel(later, tick=False):
        taken = await m.charges.charger._claim(install, MAR, APR, 2000, "x", later, wait=False)
        stored = await m.invoice("i1")
        assert stored == taken
        assert (stored["status"], stored["attempt"], stored["amountCents"]) == ("processing", 2, 2000)
        assert stored["claim"] != failed["claim"]
        assert stored["claimedAt"] == stored["attemptStartedAt"] == stored["updatedAt"] == later
        with pytest.raises(Conflict) as raised:
            await m.charges.charger._claim(
                install, MAR, APR, 2000, "x", later + timedelta(seconds=1), wait=False
            )
    assert raised.value.message == "A charge for this install and period is in progress; try again shortly"


async def test_a_late_failure_of_a_claim_taken_over_changes_nothing(m: Money) -> None:
    """A process whose claim ran out (and was taken over) hears back late: its failure is not
    written over the new claim's attempt. Driven step by step through the claim itself."""
    await deal(m)
    install = await m.store.installs.find_one({"_id": "i1"})
    now = datetime.now(UTC)
    first = await m.charges.charger._claim(install, MAR, APR, 1000, "x", now, wait=False)
    later = now + timedelta(minutes=6)
    second = await m.charges.charger._claim(install, MAR, APR, 1000, "x", later, wait=False)
    assert second["_id"] == first["_id"] and second["claim"] != first["claim"]
    await m.charges.charger._attempt_failed(first, "late", "card_declined")
    invoice = await m.invoice("i1")
    assert (invoice["status"], invoice["claim"], "failure" in invoice) == (
        "processing",
        second["claim"],
        False,
    )


async def test_a_waiting_call_answers_already_paid_when_the_other_caller_finishes(m: Money) -> None:
    await deal(m)
    # Another live caller holds the period's claim (seeded: a fresh `processing` invoice) ...
    now = datetime.now(UTC)
    other = {
        "_id": "inv_other",
        "installId": "i1",
        "periodStart": MAR,
        "periodEnd": APR,
        "status": "processing",
    }
    await m.store["invoices"].insert_one(
        {**other, "attempt": 1, "claim": "c", "claimedAt": now, "attemptStartedAt": now}
    )

    async def finish() -> None:
        await m.store["invoices"].update_one({"_id": "inv_other"}, {"$set": {"status": "paid"}})

    # ... and finishes a moment later, as a slow upstream would (the call polls until it does;
    # should the update land first, the call finds it paid at once: the same answer).
    started: list[asyncio.Task[None]] = []
    asyncio.get_running_loop().call_later(0.3, lambda: started.append(asyncio.ensure_future(finish())))
    assert await m.charges.charge_cycle(DEPLOYER, body()) == {
        "status": "already_paid",
        "invoiceId": "inv_other",
    }
    assert m.charge_keys() == []


async def test_the_key_lifetime_counts_from_the_attempt_not_from_the_last_takeover(m: Money) -> None:
    await deal(m)
    await unknown_outcome(m, body())
    invoice = await m.invoice("i1")
    install = await m.store.installs.find_one({"_id": "i1"})
    start = invoice["attemptStartedAt"]
    with pytest.raises(BadGateway):  # taken over 22 hours on (the same answer replayed)
        await m.charges.charge(install, MAR, APR, 1000, "x", wait=False, now=start + timedelta(hours=22))
    m.fake.violations.clear()
    with pytest.raises(Conflict) as raised:
        await m.charges.charge(install, MAR, APR, 1000, "x", wait=False, now=start + timedelta(hours=23))
    assert "unknown outcome for over a day" in raised.value.message


async def test_an_invoice_without_an_attempt_start_counts_from_its_claim(m: Money) -> None:
    """An invoice written before `attemptStartedAt` existed (seeded): its claim time stands in."""
    await deal(m)
    install = await m.store.installs.find_one({"_id": "i1"})
    claimed = datetime.now(UTC) - timedelta(hours=1)
    fields = {
        "installId": "i1",
        "templateId": "t1",
        "periodStart": MAR,
        "periodEnd": APR,
        "status": "processing",
    }
    money = {"amountCents": 1000, "feeCents": 100, "builderAmountCents": 900, "payoutAccountId": None}
    await m.store["invoices"].insert_one(
        {"_id": "inv_old", **fields, **money, "attempt": 1, "claim": "c", "claimedAt": claimed}
    )
    outcome = await m.charges.charge(install, MAR, APR, 1000, "x", wait=False)
    assert outcome.charged_now and outcome.invoice["_id"] == "inv_old"
    await m.store["invoices"].update_one(
        {"_id": "inv_old"}, {"$set": {"status": "processing", "claimedAt": claimed}}
    )
    with pytest.raises(Conflict):  # 23 hours after that claim: left to an operator
        await m.charges.charge(install, MAR, APR, 1000, "x", wait=False, now=claimed + timedelta(hours=23))
