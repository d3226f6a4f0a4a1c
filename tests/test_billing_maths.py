"""The billing maths' invariants (property-based): pure functions, no app, no database.

A module of its own so `make mutate` can run it alone against svc/billing/usage.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import example, given
from hypothesis import strategies as st

from svc.billing.usage import amount_cents, money, price_display, price_segments, projected_monthly, split_fee


@given(st.integers(min_value=0, max_value=10**12))
@example(5)  # 0.5 cent: halves go up (half-down and half-even would give 0)
@example(15)
@example(25)  # half-even would give 2
def test_fee_and_builder_share_always_add_up(total: int) -> None:
    fee, builder = split_fee(total)
    assert fee + builder == total
    assert fee >= 0 and builder >= 0
    # The fee is 10% to the nearest cent, halves up: fee - total/10 lies in (-1/2, 1/2].
    assert -5 < fee * 10 - total <= 5


@given(st.integers(min_value=0, max_value=10**6), st.integers(min_value=1, max_value=10**5))
def test_per_run_is_runs_times_price(runs: int, price: int) -> None:
    assert amount_cents("per_run", price, runs, 0) == runs * price


@given(st.integers(min_value=0, max_value=10**9), st.integers(min_value=1, max_value=10**5))
def test_per_k_tokens_rounds_up_to_the_next_cent(tokens: int, price: int) -> None:
    cents = amount_cents("per_k_tokens", price, 0, tokens)
    assert type(cents) is int, "integer cents, never a float"
    assert cents * 1000 >= tokens * price
    assert (cents - 1) * 1000 < tokens * price or cents == 0


@given(st.integers(min_value=0, max_value=10**6), st.integers(min_value=0, max_value=10**9))
def test_free_is_free(runs: int, tokens: int) -> None:
    assert amount_cents("free", None, runs, tokens) == 0


@given(st.integers(min_value=0, max_value=10**9), st.integers(min_value=1, max_value=365))
@example(1, 60)  # exactly half a cent: up
@example(3, 60)  # 1.5 cents: up to 2
def test_projection_scales_to_thirty_days(total: int, days: int) -> None:
    projected = projected_monthly(total, days)
    assert type(projected) is int, "integer cents, never a float"
    # Rounded half up: projected - total*30/days lies in (-1/2, 1/2].
    assert -days < 2 * (projected * days - total * 30) <= days


def test_displays() -> None:
    assert money(0) == "$0.00"
    assert money(123456) == "$1,234.56"
    assert price_display("per_run", 50) == "$0.50 per run"
    assert price_display("per_k_tokens", 2) == "$0.02 per 1K tokens"
    assert price_display("free", None) == "Free"


def test_a_paid_model_without_a_price_charges_nothing() -> None:
    """No stored price means nothing owed (never a default price)."""
    assert amount_cents("per_run", None, 7, 0) == 0
    assert amount_cents("per_k_tokens", None, 0, 5000) == 0
    assert price_display("per_run", None) == "$0.00 per run"
    assert price_display("per_k_tokens", None) == "$0.00 per 1K tokens"


START = datetime(2025, 3, 1, tzinfo=UTC)
END = datetime(2025, 4, 1, tzinfo=UTC)


def day(n: int) -> datetime:
    return START + timedelta(days=n)


def test_a_template_without_a_price_history_is_priced_as_it_stands() -> None:
    assert price_segments({"pricingModel": "per_run", "priceUsdCents": 40}, START, END) == [
        ("per_run", 40, START, END)
    ]
    assert price_segments({}, START, END) == [("free", None, START, END)]  # no model: free


def test_the_period_is_cut_where_the_price_in_force_changes() -> None:
    """Usage is priced at the price in force when it was made: each history entry holds from
    its `from` to the next entry's, clipped to the period; entries are taken in date order
    whatever order they are stored in, and one in force only outside the period is left out."""
    history = [
        {"from": day(20), "pricingModel": "per_k_tokens", "priceUsdCents": 3},
        {"from": day(-40), "pricingModel": "per_run", "priceUsdCents": 10},
        {"from": day(31), "pricingModel": "per_run", "priceUsdCents": 99},  # from the period's end
        {"from": day(-10), "pricingModel": "free"},
        {"from": day(5), "pricingModel": "per_run", "priceUsdCents": 25},
        {"from": day(40), "pricingModel": "per_run", "priceUsdCents": 7},  # after it
    ]
    template = {"pricingModel": "per_run", "priceUsdCents": 7, "priceHistory": history}
    assert price_segments(template, START, END) == [
        ("free", None, START, day(5)),
        ("per_run", 25, day(5), day(20)),
        ("per_k_tokens", 3, day(20), END),
    ]
    # A period inside one entry's time is one segment; one before every entry has none.
    assert price_segments(template, day(6), day(7)) == [("per_run", 25, day(6), day(7))]
    assert price_segments(template, day(-60), day(-50)) == []
    # Stored without a time zone (as the database answers), read as UTC.
    naive = [{**entry, "from": entry["from"].replace(tzinfo=None)} for entry in history]
    assert price_segments({**template, "priceHistory": naive}, START, END) == price_segments(
        template, START, END
    )
