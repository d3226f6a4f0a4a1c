"""The monthly cycle (svc/billing/cycle.py) and cancel billing (svc/billing/cancellation.py) as
fast tables: no app, no Ray (tests/support/money.py builds the services).

The billing job's own tests (tests/test_billing_cycle.py) drive it through the app; these are
the fast tests `make mutate` runs (docs/testing.md): which installs a cycle charges, each one's
period and amount, what it counts, the resumption of a charge a dead process left, and cancel
billing's final charge and receipt. Periods are under an hour, so usage is read from the run
records written here (the hourly counters are not involved).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine

from svc.billing.usage import install_amount
from svc.core import Conflict, NotFound
from tests.support.billing import CARD
from tests.support.money import Money, money_world

CE = datetime(2025, 4, 1, tzinfo=UTC)  # the cycle's end
HALF = timedelta(minutes=30)
KEY = "svc-charge:{}:2025-03-31T23:30:00.000Z:2025-04-01T00:00:00.000Z:1"
DECLINED = "pm_card_chargeDeclined"


@pytest.fixture
async def m(store: Any, make_settings: Any, aiohttp_server: Any) -> Money:
    world = await money_world(store, make_settings, aiohttp_server)
    await world.builder("u-b")
    return world


def counts(**values: int) -> dict[str, int]:
    return {"charged": 0, "alreadyPaid": 0, "skipped": 0, "failed": 0, "resumed": 0, **values}


class Renewals:
    """The job's lease renewal, counted."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self) -> None:
        self.calls += 1


async def test_the_cycle_charges_each_active_paid_install_for_its_usage(m: Money) -> None:
    owner = {"kind": "user", "id": "u-b"}
    await m.template("t100", owner, price=100)
    await m.template("t50", owner, price=50)
    await m.template("t49", owner, price=49)
    await m.template("ttok", owner, model="per_k_tokens", price=20)
    await m.template("tfree", owner, model="free", price=None)
    history = [{"from": CE - timedelta(days=60), "pricingModel": "per_run", "priceUsdCents": 100}]
    await m.template("twas", owner, model="free", price=None, priceHistory=history)
    await m.template("tdraft", owner, kind="draft")
    since = CE - HALF
    rows = [  # install, template, status, extra fields, completed runs → amount charged (None: not)
        ("i-ok", "t100", "completed", {}, 3, 300),
        ("i-50", "t50", "completed", {}, 1, 50),
        ("i-49", "t49", "completed", {}, 1, None),
        ("i-49b", "t49", "completed", {}, 1, None),
        ("i-tok", "ttok", "completed", {}, 2, 100),  # 2 x 2,500 tokens at $0.20 per 1K
        ("i-free", "tfree", "completed", {}, 3, None),
        ("i-was", "twas", "completed", {}, 1, 100),  # free now, paid in the period: billed
        ("i-draft", "tdraft", "completed", {}, 3, None),
        ("i-stopped", "t100", "stopped", {}, 3, None),
        ("i-pending", "t100", "pending", {}, 3, None),
        ("i-nocard", "t100", "completed", {"card": None}, 3, None),
        ("i-declined", "t100", "completed", {"card": DECLINED}, 3, None),
        ("i-declined2", "t100", "completed", {"card": DECLINED}, 1, None),
        ("i-gone", "t100", "cancelled", {"cancelledAt": CE - timedelta(minutes=10)}, 2, 200),
        ("i-late", "t100", "cancelled", {"cancelledAt": CE + timedelta(days=1)}, 1, 100),
        ("i-old", "t100", "cancelled", {"cancelledAt": CE - timedelta(days=400)}, 3, None),
    ]
    m.fake.declined_methods.add(DECLINED)
    for install, template, status, extra, completed, _amount in rows:
        card = extra.pop("card", CARD)
        await m.install(install, template, f"u-{install}", created=since, status=status, card=card, **extra)
        await m.runs(
            install, since + timedelta(minutes=5), completed=completed, failed=2, tokens=(1500, 1000)
        )
    # A run after the cancel (and one at the cycle's end) is not billed.
    await m.runs("i-gone", CE - timedelta(minutes=5), completed=4)
    await m.runs("i-ok", CE, completed=4)
    renew = Renewals()
    result = await m.charges.run_cycle(CE, CE, renew)
    assert result == counts(charged=6, skipped=2, failed=2)
    assert renew.calls == 8  # after each charge tried, not after a skip
    invoices = {doc["installId"]: doc async for doc in m.store["invoices"].find({})}
    assert {i: doc["amountCents"] for i, doc in invoices.items() if doc["status"] == "paid"} == {
        install: amount for install, *_, amount in rows if amount is not None
    }
    assert invoices["i-declined"]["status"] == invoices["i-declined2"]["status"] == "failed"
    for install, doc in invoices.items():
        end = CE - timedelta(minutes=10) if install == "i-gone" else CE
        assert (doc["periodStart"], doc["periodEnd"], doc["source"]) == (since, end, "monthly"), install
    assert f"{KEY.format('i-ok')}" in m.charge_keys()
    # A rerun finds every period billed and charges nobody again.
    assert await m.charges.run_cycle(CE, CE) == counts(alreadyPaid=6, skipped=2, failed=2)
    assert len(m.fake.succeeded_charges()) == 6


async def test_an_install_cancelled_just_within_the_lookback_is_still_billed(m: Money) -> None:
    await m.template("t1", {"kind": "user", "id": "u-b"})
    cut = CE - timedelta(days=400)
    for install, cancelled in (("i-in", cut + timedelta(seconds=1)), ("i-out", cut)):
        await m.install(
            install, "t1", f"u-{install}", created=cancelled - HALF, status="cancelled", cancelledAt=cancelled
        )
    await m.runs("i-in", cut - timedelta(minutes=10), completed=1)
    await m.charges.run_cycle(CE, CE)
    assert [doc["installId"] async for doc in m.store["invoices"].find({})] == ["i-in"]


async def test_the_cycle_claims_with_the_time_it_is_given(m: Money) -> None:
    await m.template("t1", {"kind": "user", "id": "u-b"})
    await m.install("i1", "t1", created=CE - HALF)
    await m.runs("i1", CE - timedelta(minutes=5), completed=1)
    later = datetime.now(UTC) + timedelta(hours=1)
    assert await m.charges.run_cycle(CE, later) == counts(charged=1)
    assert (await m.invoice("i1"))["claimedAt"] == later.replace(microsecond=later.microsecond // 1000 * 1000)


async def stale_charge(m: Money) -> dict[str, Any]:
    """An install whose monthly charge had an unknown outcome (left `processing`)."""
    await m.template("t1", {"kind": "user", "id": "u-b"})
    await m.install("i0", "t0", card=None)  # another install, before it (not billed: no template)
    await m.install("i1", "t1", created=CE - HALF)
    await m.runs("i1", CE - timedelta(minutes=5), completed=2)
    # An answer that does not match the request: the outcome is unknown (a provider failure would
    # do the same, after the SDK's retries with back-off: seconds a test).
    m.fake.intent_answer_override = {"amount": 1}
    assert await m.charges.run_cycle(CE, CE) == counts(failed=1)
    m.fake.intent_answer_override = {}
    m.fake.violations.clear()
    # As if the request had been lost on its way: the provider holds nothing for the key.
    m.fake.idempotent.clear()
    m.fake.payment_intents.clear()
    invoice = await m.invoice("i1")
    assert (invoice["status"], invoice["amountCents"]) == ("processing", 200)
    # What the periods of later usage would bill instead: nothing, the period is taken.
    await m.runs("i1", CE - timedelta(minutes=4), completed=5)
    return invoice


async def test_a_charge_left_processing_is_resumed_with_its_key_once_its_lease_is_over(m: Money) -> None:
    invoice = await stale_charge(m)
    lease_end = invoice["claimedAt"] + timedelta(minutes=5)
    assert await m.charges.run_cycle(CE, lease_end) == counts(alreadyPaid=1)
    assert m.fake.succeeded_charges() == []
    after = lease_end + timedelta(milliseconds=1)
    assert await m.charges.run_cycle(CE, after) == counts(resumed=1, alreadyPaid=1)
    paid = await m.invoice("i1")
    assert (paid["status"], paid["attempt"], paid["amountCents"], paid["source"]) == (
        "paid",
        1,
        200,
        "monthly",
    )
    assert (paid["periodStart"], paid["periodEnd"]) == (invoice["periodStart"], invoice["periodEnd"])
    assert set(m.charge_keys()) == {KEY.format("i1")}
    assert [pi["amount"] for pi in m.fake.succeeded_charges()] == [200]
    charged = [
        d["meta"] async for d in m.store["timeline"].find({"kind": "billing", "action": "billing.charged"})
    ]
    assert charged == [{"invoiceId": paid["_id"], "amountCents": 200, "source": "monthly"}]


async def test_a_charge_older_than_its_key_is_not_resumed(m: Money) -> None:
    invoice = await stale_charge(m)
    key_end = invoice["attemptStartedAt"] + timedelta(hours=23)
    assert await m.charges.run_cycle(CE, key_end) == counts(alreadyPaid=1)
    assert (await m.invoice("i1"))["status"] == "processing" and m.fake.succeeded_charges() == []
    # Just inside the key's lifetime: resumed (and failing again, counted).
    m.fake.intent_answer_override = {"amount": 1}
    assert await m.charges.run_cycle(CE, key_end - timedelta(milliseconds=1)) == counts(
        failed=1, alreadyPaid=1
    )
    m.fake.violations.clear()


async def test_a_stale_charge_of_a_removed_install_is_left_alone(m: Money) -> None:
    await stale_charge(m)
    await m.store.installs.delete_one({"_id": "i1"})
    assert await m.charges.run_cycle(CE, CE + timedelta(hours=1)) == counts()


async def test_every_stale_charge_is_resumed_and_counted(m: Money) -> None:
    """Three installs' charges left `processing`: the first install since removed, the other two
    resumed, failing, then succeeding (each counted)."""
    await m.template("t1", {"kind": "user", "id": "u-b"})
    for install in ("i1", "i2", "i3"):
        await m.install(install, "t1", f"u-{install}", created=CE - HALF)
        await m.runs(install, CE - timedelta(minutes=5), completed=1)
    m.fake.intent_answer_override = {"amount": 1}
    assert await m.charges.run_cycle(CE, CE) == counts(failed=3)
    await m.store.installs.delete_one({"_id": "i1"})
    later = datetime.now(UTC) + timedelta(hours=1)
    assert await m.charges.run_cycle(CE, later) == counts(failed=2, alreadyPaid=2)
    m.fake.intent_answer_override = {}
    m.fake.violations.clear()
    m.fake.idempotent.clear()  # as if those requests had been lost on their way
    assert await m.charges.run_cycle(CE, later + timedelta(hours=1)) == counts(resumed=2, alreadyPaid=2)


# ---- cancel billing --------------------------------------------------------------------------

NOW = datetime(2027, 1, 15, 12, 30, tzinfo=UTC)  # forwards only (docs/testing.md)
START = NOW - HALF


@pytest.fixture
def cancel_time() -> Iterator[None]:
    """Cancel billing charges up to its own clock: frozen within one hour, so usage is read
    from the run records."""
    with time_machine.travel(NOW, tick=False):
        yield


async def cancel_deal(m: Money, price: int = 100, completed: int = 3, **install: Any) -> None:
    await m.template("t1", {"kind": "user", "id": "u-b"}, price=price)
    await m.user("u-dep", "me@example.com")
    await m.install("i1", "t1", created=START, **install)
    await m.runs("i1", START + timedelta(minutes=5), completed=completed, failed=2)


async def receipts(m: Money) -> list[dict[str, Any]]:
    return [doc async for doc in m.store["outbox"].find({"kind": "cancel_receipt"})]


def receipt_body(amount: str, note: str, since: datetime = START) -> str:
    return (
        "Your install of Name t1 (i1) is cancelled.\n\n"
        f"Usage period: {since.strftime('%Y-%m-%dT%H:%M:%S.000Z')} to 2027-01-15T12:30:00.000Z\n"
        f"Amount charged: {amount}\n{note}\n"
    )


async def test_cancel_charges_the_usage_since_the_last_invoice_and_mails_a_receipt(
    m: Money, cancel_time: None
) -> None:
    await cancel_deal(m)
    assert await m.charges.cancel_install("u-dep", "i1") == {
        "status": "cancelled",
        "charged": True,
        "amountCents": 300,
    }
    invoice = await m.invoice("i1")
    assert (invoice["status"], invoice["amountCents"], invoice["source"]) == ("paid", 300, "cancel")
    assert (invoice["periodStart"], invoice["periodEnd"], invoice["claimedAt"]) == (START, NOW, NOW)
    install = await m.store.installs.find_one({"_id": "i1"})
    assert (install["status"], install["cancellingAt"]) == ("cancelled", NOW)
    [mail] = await receipts(m)
    assert (mail["to"], mail["subject"]) == ("u-dep@example.com", "Receipt: Name t1 cancelled")
    assert mail["body"] == receipt_body("$3.00", "Charged $3.00 to the saved payment method.")
    [entry] = [
        doc async for doc in m.store["timeline"].find({"kind": "billing", "action": "billing.cancelled"})
    ]
    assert (entry["installId"], entry["actorId"], entry["via"]) == ("i1", "u-dep", "session")
    assert entry["meta"] == {"charged": True, "amountCents": 300, "dueCents": 300}


async def test_cancel_bills_only_what_the_last_invoice_did_not(m: Money, cancel_time: None) -> None:
    await cancel_deal(m, completed=0)
    billed = START + timedelta(minutes=10)
    await m.charges.charge(
        await m.store.installs.find_one({"_id": "i1"}), START, billed, 500, "x", wait=False
    )
    await m.runs("i1", billed + timedelta(minutes=1), completed=2)
    assert await m.charges.cancel_install("u-dep", "i1") == {
        "status": "cancelled",
        "charged": True,
        "amountCents": 200,
    }
    cancel = await m.store["invoices"].find_one({"source": "cancel"})
    assert (cancel["periodStart"], cancel["periodEnd"]) == (billed, NOW)
    [mail] = await receipts(m)
    assert mail["body"] == receipt_body("$2.00", "Charged $2.00 to the saved payment method.", since=billed)


async def test_what_cancel_does_when_it_cannot_charge(m: Money, cancel_time: None) -> None:
    """(price, completed runs, install fields, declined) → the receipt's note, nothing charged."""
    under = "No charge: the amount since the last invoice is under $0.50."
    cases: list[tuple[int, int, dict[str, Any], bool, int, str]] = [
        (49, 1, {}, False, 49, under),
        (100, 0, {}, False, 0, under),
        (100, 3, {"card": None}, False, 300, "$3.00 is due; no payment method is saved on this install."),
        (
            100,
            3,
            {"card": None, "payPaymentMethodId": CARD},
            False,
            300,
            "$3.00 is due; no payment method is saved on this install.",
        ),
        (
            100,
            3,
            {},
            True,
            300,
            "$3.00 is due; the charge did not go through "
            "(The payment was declined: Your card was declined.).",
        ),
    ]
    for price, completed, install, declined, due, note in cases:
        await m.store.installs.delete_many({})
        await m.store["templates"].delete_many({})
        await m.store.users.delete_many({"_id": "u-dep"})
        await m.store["outbox"].delete_many({})
        await m.store["runs"].delete_many({})
        await m.store["timeline"].delete_many({})
        m.fake.declined_methods = {CARD} if declined else set()
        await cancel_deal(m, price=price, completed=completed, **install)
        assert await m.charges.cancel_install("u-dep", "i1") == {
            "status": "cancelled",
            "charged": False,
            "amountCents": 0,
        }
        [mail] = await receipts(m)
        assert mail["body"] == receipt_body("$0.00", note), note
        [entry] = [
            doc["meta"]
            async for doc in m.store["timeline"].find({"kind": "billing", "action": "billing.cancelled"})
        ]
        assert entry == {"charged": False, "amountCents": 0, "dueCents": due}
    assert m.fake.succeeded_charges() == []


async def test_cancel_bills_a_template_that_was_paid_in_the_period_and_not_a_free_one(
    m: Money, cancel_time: None
) -> None:
    history = [{"from": START - timedelta(days=1), "pricingModel": "per_run", "priceUsdCents": 100}]
    for template, extra, charged in (("t1", {"priceHistory": history}, 300), ("t2", {}, 0)):
        await m.template(template, {"kind": "user", "id": "u-b"}, model="free", price=None, **extra)
        await m.install(f"i-{template}", template, created=START)
        await m.runs(f"i-{template}", START + timedelta(minutes=1), completed=3)
        answer = await m.charges.cancel_install("u-dep", f"i-{template}")
        assert answer["amountCents"] == charged, template
        [meta] = [
            d["meta"]
            async for d in m.store["timeline"].find(
                {"installId": f"i-{template}", "kind": "billing", "action": "billing.cancelled"}
            )
        ]
        assert meta["dueCents"] == charged


async def test_cancel_charges_from_fifty_cents(m: Money, cancel_time: None) -> None:
    await cancel_deal(m, price=50, completed=1)
    assert await m.charges.cancel_install("u-dep", "i1") == {
        "status": "cancelled",
        "charged": True,
        "amountCents": 50,
    }


async def test_an_org_install_is_cancelled_by_its_deployer_while_a_member(
    m: Money, cancel_time: None
) -> None:
    await cancel_deal(m, owner={"kind": "org", "id": "o1"})
    await m.install("i2", "t1", owner={"kind": "org", "id": "o1"}, deployedBy="u-gone", created=START)
    await m.store.org_members.insert_one({"_id": "m1", "orgId": "o1", "userId": "u-dep", "role": "member"})
    with pytest.raises(NotFound):  # no longer a member
        await m.charges.cancel_install("u-gone", "i2")
    assert (await m.charges.cancel_install("u-dep", "i1"))["status"] == "cancelled"


async def test_who_may_cancel_and_when(m: Money, cancel_time: None) -> None:
    await cancel_deal(m)
    await m.install("i-pending", "t1", status="pending")
    await m.install("i-busy", "t1", cancellingAt=NOW - timedelta(minutes=4, seconds=59))
    await m.install("i-done", "t1", status="cancelled")
    cases = [
        ("u-dep", "i-none", NotFound, "Install not found"),
        ("u-other", "i1", NotFound, "Install not found"),
        ("u-dep", "i-pending", NotFound, "Install not found"),
        ("u-dep", "i-done", Conflict, "Install is already cancelled"),
        ("u-dep", "i-busy", Conflict, "A cancellation of this install is already in progress"),
    ]
    for user, install, error, message in cases:
        with pytest.raises(error) as raised:
            await m.charges.cancel_install(user, install)
        assert raised.value.message == message, install
    assert m.charge_keys() == [] and await receipts(m) == []


async def test_the_receipt_goes_to_the_account_email_without_a_deployer_email(
    m: Money, cancel_time: None
) -> None:
    await cancel_deal(m, deployerEmail=None)
    await m.charges.cancel_install("u-dep", "i1")
    assert [mail["to"] for mail in await receipts(m)] == ["me@example.com"]
    await m.install("i2", "t1", "u-mute", created=START, deployerEmail=None)
    await m.charges.cancel_install("u-mute", "i2")  # no address at all: no receipt
    assert len(await receipts(m)) == 1


async def test_the_amount_prices_each_part_of_the_period_at_the_price_in_force(m: Money) -> None:
    """`install_amount` over a price history: a free part first (skipped, not the end of the
    sum), then a per-run part and a per-token part, each added to the total."""
    since = CE - HALF
    history = [
        {"from": since - HALF, "pricingModel": "free"},
        {"from": since + timedelta(minutes=10), "pricingModel": "per_run", "priceUsdCents": 100},
        {"from": since + timedelta(minutes=20), "pricingModel": "per_k_tokens", "priceUsdCents": 20},
    ]
    owner = {"kind": "user", "id": "u-b"}
    await m.template("t1", owner, model="per_k_tokens", price=20, priceHistory=history)
    await m.install("i1", "t1", created=since)
    await m.runs("i1", since + timedelta(minutes=5), completed=3)  # free then
    await m.runs("i1", since + timedelta(minutes=15), completed=2, failed=1)  # 2 x $1.00
    await m.runs("i1", since + timedelta(minutes=25), completed=2, tokens=(1500, 1000))  # 5K tokens: $1.00
    template = await m.store["templates"].find_one({"_id": "t1"})
    assert await install_amount(m.store, "i1", template, since, CE) == 300
    assert await install_amount(m.store, "i1", template, since, since + timedelta(minutes=10)) == 0
