"""The money paths against the provider's published API description: the check itself, the
off-session charge it corrected (defect 3), a refused charge (defect 2) and the outcome of every
provider error class (docs/payments.md). Event sequences: tests/test_payment_events.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import stripe

from tests.fakes.stripe import API_VERSION
from tests.support.accounts import app_store
from tests.support.billing import (
    CARD,
    charge_cycle,
    paid_install,
    payment_settings,
    report,
    start_fake_stripe,
)
from tests.support.runs import start_paperclip

SEPTEMBER = {"periodStart": "2026-09-01T00:00:00Z", "periodEnd": "2026-10-01T00:00:00Z"}


def test_the_vendored_description_is_the_sdks_api_version() -> None:
    from tests.fakes.stripe_contract import spec

    assert spec()["info"]["version"] == stripe.api_version == API_VERSION


def test_the_check_refuses_what_the_real_api_would() -> None:
    """The shapes the check caught (docs/payments.md), kept caught."""
    from tests.fakes.stripe_contract import check_object, check_request, check_response

    charge = {"amount": "300", "currency": "usd", "confirm": "true", "metadata": {"invoiceId": "inv_1"}}
    assert check_request("POST", "/v1/payment_intents", charge) == []
    assert check_request("POST", "/v1/payment_intents", {**charge, "payment_method_types": ["card"]})
    assert check_request("POST", "/v1/payment_intents", {**charge, "amount": "3.00"})
    assert check_request("POST", "/v1/payment_intents", {"currency": "usd"})  # amount is required
    assert check_request("POST", "/v1/refunds", {"payment_intent": "pi_1"})  # not an operation we describe
    intent = {
        "id": "pi_1",
        "object": "payment_intent",
        "amount": 300,
        "currency": "usd",
        "status": "succeeded",
    }
    assert check_response("POST", "/v1/payment_intents", 200, intent) == []
    assert check_response("POST", "/v1/payment_intents", 200, {**intent, "idempotency_key": "k"})
    assert check_response(
        "POST", "/v1/account_links", 200, {"object": "account_link", "url": "u", "return_url": "r"}
    )
    assert check_object("subscription", {"id": "sub_1", "object": "subscription", "current_period_end": 1})
    assert check_response(
        "POST", "/v1/customers", 400, {"error": {"type": "invalid_request_error", "code": None}}
    )
    assert check_response("POST", "/v1/customers", 400, {"error": {"type": "invalid_request_error"}}) == []


def test_the_refresh_script_extracts_our_operations_from_a_published_description() -> None:
    """`--spec` on a miniature of spec3.json: our operations, the components their answers
    reference (to the depth asked), nothing else."""
    from scripts.stripe_openapi import ENDPOINTS, from_spec

    form = "application/x-www-form-urlencoded"
    paths: dict[str, Any] = {}
    for method, path, _, _, component in ENDPOINTS:
        operation: dict[str, Any] = {
            "responses": {"200": {"content": {"application/json": {"schema": {"$ref": f"#/c/{component}"}}}}}
        }
        if method == "post":
            body = {"type": "object", "properties": {"metadata": {"type": "object"}}}
            operation["requestBody"] = {"content": {form: {"schema": body}}}
        else:
            operation["parameters"] = [{"in": "query", "name": "expand", "schema": {"type": "array"}}]
        paths.setdefault(path, {})[method] = operation
    paths["/v1/refunds"] = {"post": {"responses": {}}}
    names = {component for *_, component in ENDPOINTS} | {"transfer"}
    schemas = {
        name: {"type": "object", "properties": {"nested": {"$ref": "#/components/schemas/deep"}}}
        for name in names
    }
    schemas["deep"] = {"type": "object", "properties": {"deeper": {"$ref": "#/components/schemas/deepest"}}}
    schemas["deepest"] = {"type": "object", "description": "dropped"}
    schemas["refund"] = {"type": "object"}
    spec = {"info": {"version": "2026-10-28.endive"}, "paths": paths, "components": {"schemas": schemas}}
    doc = from_spec(spec, depth=1)
    assert "/v1/refunds" not in doc["paths"] and "refund" not in doc["components"]["schemas"]
    operation = doc["paths"]["/v1/payment_intents"]["post"]
    assert operation["requestBody"]["content"][form]["schema"]["properties"] == {
        "metadata": {"type": "object"}
    }
    get = doc["paths"]["/v1/accounts/{account}"]["get"]["requestBody"]["content"][form]["schema"]
    assert get["properties"] == {"expand": {"type": "array"}}
    assert "deep" in doc["components"]["schemas"]
    assert doc["components"]["schemas"]["deep"]["properties"]["deeper"] == {}  # past the depth
    assert doc["info"]["version"] == "2026-10-28.endive"


# ---- defect 3: off-session charges are card-only and never redirect ------------------------------


async def test_off_session_charges_are_card_only_and_need_no_return_url(
    make_client: Any, aiohttp_server: Any
) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    deal = await paid_install(client, fake)
    response = await charge_cycle(client, installId=deal.install_id, amountCents=300, **SEPTEMBER)
    assert response.status == 200, await response.text()
    [(_, _, params)] = [r for r in fake.requests if r[1] == "/v1/payment_intents"]
    assert params["automatic_payment_methods"] == {"enabled": "true", "allow_redirects": "never"}
    assert params["off_session"] == "true" and params["confirm"] == "true"
    assert "return_url" not in params


# ---- defect 2 and the error table (docs/payments.md) ----------------------------------------------


async def invoice_of(client: Any, install_id: str) -> dict[str, Any]:
    invoice = await app_store(client)["invoices"].find_one({"installId": install_id})
    assert invoice is not None
    return dict(invoice)


async def test_a_refused_charge_releases_its_claim_and_leaves_the_period_billable(
    make_client: Any, aiohttp_server: Any
) -> None:
    fake = await start_fake_stripe(aiohttp_server, charge_error="invalid_request")
    client = await make_client(**payment_settings(fake))
    deal = await paid_install(client, fake)
    response = await charge_cycle(client, installId=deal.install_id, amountCents=300, **SEPTEMBER)
    assert response.status == 502
    assert "refused" in (await response.json())["error"]
    invoice = await invoice_of(client, deal.install_id)
    assert invoice["status"] == "failed" and invoice["attempt"] == 1
    assert "detached" in invoice["failure"]
    assert [(a["attempt"], a["code"]) for a in invoice["attempts"]] == [
        (1, "payment_method_unexpected_state")
    ]
    assert fake.succeeded_charges() == []
    # No lease to wait out: the next call retries at once, with a new attempt (a new key).
    fake.charge_error = None
    response = await charge_cycle(client, installId=deal.install_id, amountCents=300, **SEPTEMBER)
    assert response.status == 200, await response.text()
    invoice = await invoice_of(client, deal.install_id)
    assert (invoice["status"], invoice["attempt"]) == ("paid", 2)
    assert len(fake.succeeded_charges()) == 1


async def test_cancel_after_a_refused_charge_still_bills_that_usage(
    make_client: Any, aiohttp_server: Any
) -> None:
    fake = await start_fake_stripe(aiohttp_server, charge_error="invalid_request")
    client = await make_client(**payment_settings(fake))
    # The usage: a run an orchA install reports through its install token (`svc` takes no reports).
    paperclip = await start_paperclip(aiohttp_server)
    deal = await paid_install(client, fake, model="per_run", price=100, platform="orchA", upstream=paperclip)
    await report(client, deal)
    now = datetime.now(UTC).isoformat()
    period = {"periodStart": "2026-01-01T00:00:00Z", "periodEnd": now}
    assert (await charge_cycle(client, installId=deal.install_id, amountCents=100, **period)).status == 502
    fake.charge_error = None
    response = await client.patch(
        f"/api/stripe/installs/{deal.install_id}/cancel", headers=deal.deployer.cookie
    )
    assert await response.json() == {"status": "cancelled", "charged": True, "amountCents": 100}
    assert [pi["amount"] for pi in fake.succeeded_charges()] == [100]


async def test_card_declined_row(make_client: Any, aiohttp_server: Any) -> None:
    fake = await start_fake_stripe(aiohttp_server, declined_methods={CARD})
    client = await make_client(**payment_settings(fake))
    deal = await paid_install(client, fake)
    response = await charge_cycle(client, installId=deal.install_id, amountCents=300, **SEPTEMBER)
    assert response.status == 402
    assert (await response.json())["code"] == "payment_declined"
    invoice = await invoice_of(client, deal.install_id)
    assert invoice["status"] == "failed" and invoice["attempts"][0]["code"] == "card_declined"


async def test_authentication_required_row(make_client: Any, aiohttp_server: Any) -> None:
    fake = await start_fake_stripe(aiohttp_server, charge_error="authentication_required")
    client = await make_client(**payment_settings(fake))
    deal = await paid_install(client, fake)
    response = await charge_cycle(client, installId=deal.install_id, amountCents=300, **SEPTEMBER)
    assert response.status == 402
    body = await response.json()
    assert body["code"] == "payment_declined" and "authentication" in body["error"]
    invoice = await invoice_of(client, deal.install_id)
    assert invoice["status"] == "failed" and invoice["attempts"][0]["code"] == "authentication_required"
    assert fake.succeeded_charges() == []


async def test_rate_limited_row(make_client: Any, aiohttp_server: Any) -> None:
    fake = await start_fake_stripe(aiohttp_server, charge_error="rate_limited")
    client = await make_client(**payment_settings(fake))
    deal = await paid_install(client, fake)
    response = await charge_cycle(client, installId=deal.install_id, amountCents=300, **SEPTEMBER)
    assert response.status == 503
    assert "busy" in (await response.json())["error"]
    invoice = await invoice_of(client, deal.install_id)
    assert invoice["status"] == "failed" and invoice["attempts"][0]["code"] == "rate_limit"
    fake.charge_error = None
    response = await charge_cycle(client, installId=deal.install_id, amountCents=300, **SEPTEMBER)
    assert response.status == 200 and len(fake.succeeded_charges()) == 1


async def unknown_outcome_is_resumed_with_the_same_key(client: Any, fake: Any, install_id: str) -> None:
    """The invoice stays `processing` under its claim; once the lease is over the same key is
    sent again, and the provider's replay (or a first charge) settles it: one payment at most."""
    response = await charge_cycle(client, installId=install_id, amountCents=300, **SEPTEMBER)
    assert response.status == 502
    invoice = await invoice_of(client, install_id)
    assert invoice["status"] == "processing"
    past_lease = datetime.now(UTC) - timedelta(minutes=6)
    await app_store(client)["invoices"].update_one(
        {"_id": invoice["_id"]}, {"$set": {"claimedAt": past_lease}}
    )
    response = await charge_cycle(client, installId=install_id, amountCents=300, **SEPTEMBER)
    assert response.status == 200, await response.text()
    invoice = await invoice_of(client, install_id)
    assert (invoice["status"], invoice["attempt"]) == ("paid", 1)
    assert len(fake.succeeded_charges()) == 1


async def test_network_failure_with_unknown_outcome_row(make_client: Any, aiohttp_server: Any) -> None:
    # Charged, but every answer (the SDK's two retries included) is lost on the way back.
    fake = await start_fake_stripe(aiohttp_server, drop_charge_answers=3)
    client = await make_client(**payment_settings(fake))
    deal = await paid_install(client, fake)
    await unknown_outcome_is_resumed_with_the_same_key(client, fake, deal.install_id)
    assert len(fake.payment_intents) == 1  # the resume was a replay, not a second charge


async def test_a_lost_answer_is_recovered_by_the_sdks_own_retry(
    make_client: Any, aiohttp_server: Any
) -> None:
    fake = await start_fake_stripe(aiohttp_server, drop_charge_answers=1)
    client = await make_client(**payment_settings(fake))
    deal = await paid_install(client, fake)
    response = await charge_cycle(client, installId=deal.install_id, amountCents=300, **SEPTEMBER)
    assert response.status == 200, await response.text()
    assert len(fake.payment_intents) == 1 and len(fake.succeeded_charges()) == 1


async def test_provider_5xx_row(make_client: Any, aiohttp_server: Any) -> None:
    fake = await start_fake_stripe(aiohttp_server, fail_charges=True)
    client = await make_client(**payment_settings(fake))
    deal = await paid_install(client, fake)
    attempts_before = fake.charge_attempts
    response = await charge_cycle(client, installId=deal.install_id, amountCents=300, **SEPTEMBER)
    assert response.status == 502
    assert "outcome is unknown" in (await response.json())["error"]
    assert fake.charge_attempts - attempts_before == 3  # the SDK retried twice with the same key
    fake.fail_charges = False
    invoice = await invoice_of(client, deal.install_id)
    assert invoice["status"] == "processing"
    past_lease = datetime.now(UTC) - timedelta(minutes=6)
    await app_store(client)["invoices"].update_one(
        {"_id": invoice["_id"]}, {"$set": {"claimedAt": past_lease}}
    )
    response = await charge_cycle(client, installId=deal.install_id, amountCents=300, **SEPTEMBER)
    assert response.status == 200, await response.text()
    assert len(fake.succeeded_charges()) == 1


# ---- bad input: answers the description does not allow, events we cannot place ------------------------


async def test_an_answer_the_description_does_not_allow_fails_closed(
    make_client: Any, aiohttp_server: Any, caplog: Any
) -> None:
    fake = await start_fake_stripe(aiohttp_server, intent_answer_override={"status": None})
    client = await make_client(**payment_settings(fake))
    deal = await paid_install(client, fake)
    response = await charge_cycle(client, installId=deal.install_id, amountCents=300, **SEPTEMBER)
    assert response.status == 502, await response.text()
    invoice = await invoice_of(client, deal.install_id)
    assert invoice["status"] == "processing"  # never marked paid; resumed with its key, or an operator
    assert any(
        "did not match" in record.getMessage() for record in caplog.records if record.levelname == "ERROR"
    )
    # The check saw it too; this test wanted exactly that answer.
    assert any("status" in violation for violation in fake.violations)
    fake.violations.clear()


async def test_an_answer_for_another_amount_fails_closed(make_client: Any, aiohttp_server: Any) -> None:
    fake = await start_fake_stripe(aiohttp_server, intent_answer_override={"amount": 1})
    client = await make_client(**payment_settings(fake))
    deal = await paid_install(client, fake)
    response = await charge_cycle(client, installId=deal.install_id, amountCents=300, **SEPTEMBER)
    assert response.status == 502
    assert (await invoice_of(client, deal.install_id))["status"] == "processing"
