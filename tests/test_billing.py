"""GET /api/billing over HTTP, and the billing maths' invariants (property-based)."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from svc.billing.usage import amount_cents, money, price_display, projected_monthly, split_fee
from tests.support.accounts import create_key, signup
from tests.support.billing import billing, paid_install, payment_settings, self_report

# ---- the maths ---------------------------------------------------------------------------


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
    # Rounded half up: projected - total*30/days lies in (-1/2, 1/2].
    assert -days < 2 * (projected * days - total * 30) <= days


def test_displays() -> None:
    assert money(0) == "$0.00"
    assert money(123456) == "$1,234.56"
    assert price_display("per_run", 50) == "$0.50 per run"
    assert price_display("per_k_tokens", 2) == "$0.02 per 1K tokens"
    assert price_display("free", None) == "Free"


# ---- GET /api/billing ----------------------------------------------------------------------


async def test_per_run_billing_counts_only_completed_runs(make_client: Any) -> None:
    client = await make_client(**payment_settings(None))
    deal = await paid_install(client, None, model="per_run", price=25)
    for status in ("completed", "completed", "completed", "failed"):
        await self_report(client, deal, status=status, input_tokens=100, output_tokens=50)
    response = await billing(client, deal.builder_key, templateId=deal.template["id"])
    assert response.status == 200, await response.text()
    body = await response.json()
    assert body["templateId"] == deal.template["id"]
    assert body["templateSlug"] == deal.template["slug"]
    assert body["pricing"] == {
        "model": "per_run",
        "priceUsdCents": 25,
        "envelopeFeePercent": 10,
        "priceDisplay": "$0.25 per run",
    }
    assert body["period"]["days"] == 30
    assert body["usage"] == {"totalRuns": 4, "completedRuns": 3, "totalTokens": 600, "billedTokens": 450}
    assert body["billing"] == {
        "totalAmountCents": 75,
        "builderAmountCents": 67,
        "envelopeFeeCents": 8,
        "projectedMonthlyAmountCents": 75,
        "totalAmountDisplay": "$0.75",
        "projectedMonthlyDisplay": "$0.75",
    }
    assert body["byInstall"] == [{"installId": deal.install_id, "runs": 4, "tokens": 600, "amountCents": 75}]


async def test_per_k_tokens_billing_rounds_up_per_install(make_client: Any) -> None:
    client = await make_client(**payment_settings(None))
    first = await paid_install(client, None, model="per_k_tokens", price=3)
    second = await paid_install(
        client, None, builder=(first.builder, first.builder_key), template=first.template
    )
    await self_report(client, first, input_tokens=1000, output_tokens=1)  # 1001 tokens: 3.003 -> 4 cents
    await self_report(client, first, status="failed", input_tokens=5000, output_tokens=0)  # not billed
    await self_report(client, second, input_tokens=2000, output_tokens=0)  # 6 cents exactly
    body = await (await billing(client, first.builder_key, templateSlug=first.template["slug"])).json()
    assert body["usage"] == {"totalRuns": 3, "completedRuns": 2, "totalTokens": 8001, "billedTokens": 3001}
    amounts = {row["installId"]: row["amountCents"] for row in body["byInstall"]}
    assert amounts == {first.install_id: 4, second.install_id: 6}
    assert body["billing"]["totalAmountCents"] == 10
    assert body["billing"]["envelopeFeeCents"] + body["billing"]["builderAmountCents"] == 10
    assert body["pricing"]["priceDisplay"] == "$0.03 per 1K tokens"


async def test_period_days_scales_the_projection_and_is_bounded(make_client: Any) -> None:
    client = await make_client(**payment_settings(None))
    deal = await paid_install(client, None, model="per_run", price=100)
    await self_report(client, deal)
    body = await (
        await billing(client, deal.builder_key, templateId=deal.template["id"], periodDays=7)
    ).json()
    assert body["period"]["days"] == 7
    assert body["billing"]["totalAmountCents"] == 100
    assert body["billing"]["projectedMonthlyAmountCents"] == 429  # 100 * 30 / 7, rounded
    for bad in ("366", "0", "-1", "seven", "1.5"):
        response = await billing(client, deal.builder_key, templateId=deal.template["id"], periodDays=bad)
        assert response.status == 400, bad
        assert "periodDays" in (await response.json())["error"]


async def test_billing_needs_a_template_and_hides_others_templates(make_client: Any) -> None:
    client = await make_client(**payment_settings(None))
    deal = await paid_install(client, None)
    response = await billing(client, deal.builder_key)
    assert response.status == 400
    assert "templateId or templateSlug is required" in (await response.json())["error"]
    stranger = await signup(client)
    stranger_key = await create_key(client, stranger)
    response = await billing(client, stranger_key, templateId=deal.template["id"])
    assert response.status == 404
    response = await billing(client, stranger_key, templateId=deal.template["id"], installId=deal.install_id)
    assert response.status == 404
    response = await billing(client, deal.builder_key, templateId="nope")
    assert response.status == 404


async def test_a_deployer_sees_their_own_install_only(make_client: Any) -> None:
    client = await make_client(**payment_settings(None))
    deal = await paid_install(client, None, model="per_run", price=10)
    other = await paid_install(client, None, builder=(deal.builder, deal.builder_key), template=deal.template)
    await self_report(client, deal)
    await self_report(client, other)
    await self_report(client, other)
    # A key created scoped to the install (the pipeline's key): that install only.
    scoped = await create_key(client, deal.deployer, installId=deal.install_id)
    response = await billing(client, scoped, templateId=deal.template["id"])
    assert response.status == 403
    response = await billing(client, scoped, templateId=deal.template["id"], installId=deal.install_id)
    assert response.status == 200
    body = await response.json()
    assert [row["installId"] for row in body["byInstall"]] == [deal.install_id]
    assert body["usage"]["totalRuns"] == 1
    response = await billing(client, scoped, templateId=deal.template["id"], installId=other.install_id)
    assert response.status == 403
    # An unscoped key of the deployer (the creating key stays unscoped): must name an install of
    # theirs; another's is unknown to them.
    for unscoped in (deal.deployer_key, await create_key(client, deal.deployer)):
        assert (await billing(client, unscoped, templateId=deal.template["id"])).status == 404
        response = await billing(client, unscoped, templateId=deal.template["id"], installId=other.install_id)
        assert response.status == 404
        response = await billing(client, unscoped, templateId=deal.template["id"], installId=deal.install_id)
        assert response.status == 200
    # The builder naming an install of another template learns nothing either.
    stranger_deal = await paid_install(client, None)
    response = await billing(
        client, deal.builder_key, templateId=deal.template["id"], installId=stranger_deal.install_id
    )
    assert response.status == 404


async def test_no_runs_bills_nothing(make_client: Any) -> None:
    client = await make_client(**payment_settings(None))
    deal = await paid_install(client, None, model="free", price=None)
    body = await (await billing(client, deal.builder_key, templateId=deal.template["id"])).json()
    assert body["usage"] == {"totalRuns": 0, "completedRuns": 0, "totalTokens": 0, "billedTokens": 0}
    assert body["billing"]["totalAmountCents"] == 0
    assert body["billing"]["totalAmountDisplay"] == "$0.00"
    assert body["byInstall"] == []
    assert body["pricing"]["priceDisplay"] == "Free"
