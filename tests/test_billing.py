"""GET /api/billing over HTTP (the maths' invariants: tests/test_billing_maths.py).

Runs come from orchA installs reporting through their install token, as Paperclip's reporter
does: billing is the same on every platform, and reports are refused for `svc` installs.
"""

from __future__ import annotations

from typing import Any

from tests.support.accounts import create_key, signup
from tests.support.billing import billing, paid_install, payment_settings, report
from tests.support.runs import start_paperclip

# ---- GET /api/billing ----------------------------------------------------------------------


async def test_per_run_billing_counts_only_completed_runs(make_client: Any, aiohttp_server: Any) -> None:
    client = await make_client(**payment_settings(None))
    paperclip = await start_paperclip(aiohttp_server)
    deal = await paid_install(client, None, model="per_run", price=25, platform="orchA", upstream=paperclip)
    for status in ("completed", "completed", "completed", "failed"):
        await report(client, deal, status=status, input_tokens=100, output_tokens=50)
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


async def test_per_k_tokens_billing_rounds_up_per_install(make_client: Any, aiohttp_server: Any) -> None:
    client = await make_client(**payment_settings(None))
    paperclip = await start_paperclip(aiohttp_server)
    on_orch_a: dict[str, Any] = {"platform": "orchA", "upstream": paperclip}
    first = await paid_install(client, None, model="per_k_tokens", price=3, **on_orch_a)
    second = await paid_install(
        client, None, builder=(first.builder, first.builder_key), template=first.template, **on_orch_a
    )
    await report(client, first, input_tokens=1000, output_tokens=1)  # 1001 tokens: 3.003 -> 4 cents
    await report(client, first, status="failed", input_tokens=5000, output_tokens=0)  # not billed
    await report(client, second, input_tokens=2000, output_tokens=0)  # 6 cents exactly
    body = await (await billing(client, first.builder_key, templateSlug=first.template["slug"])).json()
    assert body["usage"] == {"totalRuns": 3, "completedRuns": 2, "totalTokens": 8001, "billedTokens": 3001}
    amounts = {row["installId"]: row["amountCents"] for row in body["byInstall"]}
    assert amounts == {first.install_id: 4, second.install_id: 6}
    assert body["billing"]["totalAmountCents"] == 10
    assert body["billing"]["envelopeFeeCents"] + body["billing"]["builderAmountCents"] == 10
    assert body["pricing"]["priceDisplay"] == "$0.03 per 1K tokens"


async def test_period_days_scales_the_projection_and_is_bounded(
    make_client: Any, aiohttp_server: Any
) -> None:
    client = await make_client(**payment_settings(None))
    paperclip = await start_paperclip(aiohttp_server)
    deal = await paid_install(client, None, model="per_run", price=100, platform="orchA", upstream=paperclip)
    await report(client, deal)
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


async def test_a_deployer_sees_their_own_install_only(make_client: Any, aiohttp_server: Any) -> None:
    client = await make_client(**payment_settings(None))
    paperclip = await start_paperclip(aiohttp_server)
    on_orch_a: dict[str, Any] = {"platform": "orchA", "upstream": paperclip}
    deal = await paid_install(client, None, model="per_run", price=10, **on_orch_a)
    other = await paid_install(
        client, None, builder=(deal.builder, deal.builder_key), template=deal.template, **on_orch_a
    )
    await report(client, deal)
    await report(client, other)
    await report(client, other)
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
