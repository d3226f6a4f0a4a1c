"""Shared set-up for billing tests: the fake payment provider, an app wired to it, a builder with
a paid template, a deployer with a saved payment method and an install, and run reports.

Billing is the same on every platform (svc/billing/), so tests that need run records install on a
platform that reports its runs (orchA through the fake Paperclip, orchC through the fake
Bedrock) and report them as that platform does. An `svc` install's runs come from the managed
runtime alone: reports for it are refused (409, `Runs.require_reportable`), so its runs are
real managed runs (tests/support/runtime.py).

A plain module (not a conftest): the test modules import what they use.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from config.settings import AppKey
from tests.fakes.stripe import API_KEY, WEBHOOK_SECRET, FakeStripe, create_app
from tests.support.accounts import Caller, bearer, create_key, signup
from tests.support.installs import install_ok
from tests.support.runs import ingest, orch_a_install
from tests.support.templates import publish_template

APP_KEY = "app-key-for-billing-tests"
CARD = "pm_card_visa"


async def start_fake_stripe(aiohttp_server: Any, **switches: Any) -> FakeStripe:
    """The fake provider on 127.0.0.1."""
    fake = FakeStripe(**switches)
    server = await aiohttp_server(create_app(fake))
    fake.base_url = str(server.make_url("")).rstrip("/")
    return fake


def payment_settings(fake: FakeStripe | None, **overrides: Any) -> dict[str, Any]:
    """App settings pointing at the fake provider (none when `fake` is None)."""
    values: dict[str, Any] = {"rate_limit_multiplier": None, "app_api_keys": (AppKey(key=APP_KEY),)}
    if fake is not None:
        values.update(
            stripe_api_key=API_KEY, stripe_api_base=fake.base_url, stripe_webhook_secret=WEBHOOK_SECRET
        )
    values.update(overrides)
    return values


@dataclass
class Deal:
    """A builder's paid template and one deployer's install of it."""

    builder: Caller
    builder_key: str
    deployer: Caller
    deployer_key: str
    template: dict[str, Any]
    install_id: str
    customer_id: str | None
    platform: str = "svc"
    # orchA: the install token its agents report with; every platform: agent key -> platform id.
    install_token: str | None = None
    agents: dict[str, str] = field(default_factory=dict)


async def paid_install(
    client: Any,
    fake: FakeStripe | None,
    *,
    model: str = "per_run",
    price: int | None = 25,
    card: str | None = CARD,
    builder: tuple[Caller, str] | None = None,
    template: dict[str, Any] | None = None,
    platform: str = "svc",
    upstream: Any = None,
) -> Deal:
    """A published template with this pricing, and an install of it with a saved card.

    `platform`: `svc` (the managed runtime; no upstream), `orchA` (`upstream`: a running fake
    Paperclip, tests.support.runs.start_paperclip) or `orchC` (`upstream`: a running fake Bedrock,
    tests.support.installs.start_fake_orch_c)."""
    if builder is None:
        caller = await signup(client)
        builder = (caller, await create_key(client, caller))
    builder_caller, builder_key = builder
    if template is None:
        template = await publish_template(client, builder_key, pricingModel=model, priceUsdCents=price)
    deployer = await signup(client)
    deployer_key = await create_key(client, deployer)
    body: dict[str, Any] = {"deployerEmail": deployer.email}
    customer_id = None
    if fake is not None and card is not None:
        intent = await setup_intent(client, deployer.email)
        customer_id = intent["customerId"]
        body.update(payCustomerId=customer_id, payPaymentMethodId=card)
    token = None
    if platform == "orchA":
        assert upstream is not None, "an orchA install needs the fake Paperclip"
        created, token = await orch_a_install(client, deployer_key, upstream, template["id"], **body)
    else:
        if platform == "orchC":
            assert upstream is not None, "an orchC install needs the fake Bedrock"
            body["credentials"] = upstream.credentials()
        created = await install_ok(client, deployer_key, templateId=template["id"], platform=platform, **body)
    agents = {a["key"]: a["externalId"] for a in created.get("deployedAgents") or []}
    return Deal(
        builder_caller,
        builder_key,
        deployer,
        deployer_key,
        template,
        created["installId"],
        customer_id,
        platform,
        token,
        agents,
    )


async def setup_intent(client: Any, email: str) -> dict[str, Any]:
    """POST /api/stripe/setup-intent with the app key; asserts 200."""
    response = await client.post("/api/stripe/setup-intent", json={"email": email}, headers=bearer(APP_KEY))
    assert response.status == 200, await response.text()
    return dict(await response.json())


async def report(
    client: Any,
    deal: Deal,
    status: str = "completed",
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    run_id: str | None = None,
    agent: str = "lead",
) -> str:
    """Report one finished run of the deal's install the way its platform does; asserts 200 and
    returns the run id. orchA: Paperclip's reporter posts it to the ingest route with the install
    token; orchC: the deployer self-reports a run made directly on Bedrock. An `svc` install takes
    no reports (the managed runtime records its runs itself)."""
    run_id = run_id or uuid.uuid4().hex
    tokens = {
        name: value
        for name, value in (("inputTokens", input_tokens), ("outputTokens", output_tokens))
        if value is not None
    }
    if deal.platform == "orchA":
        assert deal.install_token is not None
        body = {"platformAgentId": deal.agents[agent], "platform": "orchA", "runId": run_id, "status": status}
        response = await ingest(client, deal.install_token, {**body, **tokens})
    elif deal.platform == "orchC":
        body = {"agentKey": agent, "status": status, "runId": run_id, **tokens}
        response = await client.post(
            f"/api/installs/{deal.install_id}/runs", json=body, headers=bearer(deal.deployer_key)
        )
    else:
        raise AssertionError(f"{deal.platform} installs take no run reports; run them instead")
    assert response.status == 200, await response.text()
    assert await response.json() == {"ok": True, "runId": run_id}
    return run_id


async def post_event(client: Any, fake: FakeStripe, payload: bytes, signature: str | None = None) -> Any:
    """POST a provider event to /api/stripe/webhook, signed as Stripe signs it unless told otherwise."""
    headers = {"Content-Type": "application/json", "Stripe-Signature": signature or fake.sign(payload)}
    return await client.post("/api/stripe/webhook", data=payload, headers=headers)


async def charge_cycle(client: Any, **body: Any) -> Any:
    """POST /api/stripe/charge-cycle with the app key; returns the response."""
    return await client.post("/api/stripe/charge-cycle", json=body, headers=bearer(APP_KEY))


async def billing(client: Any, key: str, **query: Any) -> Any:
    """GET /api/billing; returns the response."""
    return await client.get("/api/billing", params=query, headers=bearer(key))
