"""A fake of the payment provider's HTTP API (Stripe's wire format) for billing tests.

`create_app(FakeStripe())` serves the `/v1` endpoints the service calls through the
`stripe` SDK: form-encoded bodies with bracketed nesting (`transfer_data[destination]`),
JSON answers with `id` and `object`, errors as `{error: {type, code, message}}`, and
the `Idempotency-Key` header honoured the way Stripe does: a repeated key replays the
first answer and never creates a second object.

Switches: `connect_enabled=False` refuses account creation as a platform without
Connect does; `declined_methods` answer 402 `card_declined`; `hang_on_charge=N` stores
the Nth payment intent, then never answers (the caller's process "crashes" while it
waits); `fail_charges` answers 500 without charging. `sign(payload)` produces a
`Stripe-Signature` header for webhook tests.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

API_KEY = "sk_test_fake_51Hsecret"
WEBHOOK_SECRET = "whsec_fake_test_secret"


@dataclass
class FakeStripe:
    """The provider's state: customers, accounts, payment intents, sessions, subscriptions."""

    api_key: str = API_KEY
    webhook_secret: str = WEBHOOK_SECRET
    connect_enabled: bool = True
    declined_methods: set[str] = field(default_factory=set)
    hang_on_charge: int | None = None
    fail_charges: bool = False
    base_url: str = ""
    customers: dict[str, dict[str, Any]] = field(default_factory=dict)
    setup_intents: dict[str, dict[str, Any]] = field(default_factory=dict)
    accounts: dict[str, dict[str, Any]] = field(default_factory=dict)
    payment_intents: dict[str, dict[str, Any]] = field(default_factory=dict)
    checkout_sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    subscriptions: dict[str, dict[str, Any]] = field(default_factory=dict)
    transfers: dict[str, dict[str, Any]] = field(default_factory=dict)
    idempotent: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    requests: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    charge_attempts: int = 0

    def complete_onboarding(self, account_id: str) -> None:
        """The builder finished verification: charges and payouts are enabled."""
        self.accounts[account_id].update(charges_enabled=True, payouts_enabled=True, details_submitted=True)

    def restrict(self, account_id: str) -> None:
        """The provider restricted the account pending more verification."""
        self.accounts[account_id]["requirements"]["disabled_reason"] = "requirements.past_due"
        self.accounts[account_id]["payouts_enabled"] = False

    def succeeded_charges(self) -> list[dict[str, Any]]:
        """Payment intents that moved money."""
        return [pi for pi in self.payment_intents.values() if pi["status"] == "succeeded"]

    def sign(self, payload: bytes, timestamp: int | None = None, secret: str | None = None) -> str:
        """The `Stripe-Signature` header Stripe would send with this payload."""
        timestamp = timestamp or int(time.time())
        signed = f"{timestamp}.".encode() + payload
        digest = hmac.new((secret or self.webhook_secret).encode(), signed, hashlib.sha256).hexdigest()
        return f"t={timestamp},v1={digest}"

    def event(self, kind: str, obj: dict[str, Any]) -> bytes:
        """A webhook event payload of this type about this object."""
        return json.dumps(
            {
                "id": _id("evt"),
                "object": "event",
                "type": kind,
                "created": int(time.time()),
                "livemode": False,
                "api_version": "2025-01-27.acacia",
                "data": {"object": obj},
            }
        ).encode()


FAKE = web.AppKey("fake", FakeStripe)
PARAMS = web.RequestKey("params", dict)


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def decode_form(body: str) -> dict[str, Any]:
    """`a[b][c]=1&l[0]=x` → {"a": {"b": {"c": "1"}}, "l": ["x"]} (Stripe's encoding)."""
    result: dict[str, Any] = {}
    for key, value in parse_qsl(body, keep_blank_values=True):
        parts = key.replace("]", "").split("[")
        node: Any = result
        for part, following in itertools.pairwise(parts):
            node = node.setdefault(part, [] if following.isdigit() else {})
            if isinstance(node, list):
                break
        last = parts[-1]
        if isinstance(node, list):
            node.append(value)
        else:
            node[last] = value
    return result


def _error(status: int, kind: str, message: str, code: str | None = None, **extra: Any) -> web.Response:
    return web.json_response(
        {"error": {"type": kind, "message": message, "code": code, **extra}}, status=status
    )


def _missing(name: str) -> web.Response:
    return _error(404, "invalid_request_error", f"No such {name}", "resource_missing")


def _fake(request: web.Request) -> FakeStripe:
    return request.app[FAKE]


@web.middleware
async def authorise(request: web.Request, handler: Any) -> web.StreamResponse:
    """Check the secret key, record the request, replay idempotent POSTs."""
    fake = _fake(request)
    params = decode_form(await request.text()) if request.method == "POST" else dict(request.query)
    fake.requests.append((request.method, request.path, params))
    if request.headers.get("Authorization") != f"Bearer {fake.api_key}":
        return _error(401, "invalid_request_error", "Invalid API Key provided")
    request[PARAMS] = params
    key = request.headers.get("Idempotency-Key")
    if request.method == "POST" and key and key in fake.idempotent:
        status, body = fake.idempotent[key]
        return web.json_response(body, status=status, headers={"Idempotent-Replayed": "true"})
    response = await handler(request)
    if request.method == "POST" and key and isinstance(response, web.Response) and response.status < 500:
        assert response.text is not None
        fake.idempotent[key] = (response.status, json.loads(response.text))
    return response


async def create_customer(request: web.Request) -> web.Response:
    params = request[PARAMS]
    customer = {"id": _id("cus"), "object": "customer", "email": params.get("email"), "metadata": {}}
    _fake(request).customers[customer["id"]] = customer
    return web.json_response(customer)


async def create_setup_intent(request: web.Request) -> web.Response:
    params = request[PARAMS]
    fake = _fake(request)
    if params.get("customer") not in fake.customers:
        return _error(400, "invalid_request_error", "No such customer", "resource_missing")
    intent_id = _id("seti")
    intent = {
        "id": intent_id,
        "object": "setup_intent",
        "client_secret": f"{intent_id}_secret_{uuid.uuid4().hex[:16]}",
        "customer": params["customer"],
        "usage": params.get("usage", "off_session"),
        "status": "requires_payment_method",
    }
    fake.setup_intents[intent_id] = intent
    return web.json_response(intent)


async def create_account(request: web.Request) -> web.Response:
    fake = _fake(request)
    if not fake.connect_enabled:
        return _error(
            400,
            "invalid_request_error",
            "You can only create new accounts if you've signed up for Connect, which you can "
            "do at https://dashboard.stripe.com/connect.",
        )
    params = request[PARAMS]
    account = {
        "id": _id("acct"),
        "object": "account",
        "type": params.get("type", "express"),
        "email": params.get("email"),
        "charges_enabled": False,
        "payouts_enabled": False,
        "details_submitted": False,
        "requirements": {"disabled_reason": None, "currently_due": ["external_account"]},
        "metadata": params.get("metadata", {}),
    }
    fake.accounts[account["id"]] = account
    return web.json_response(account)


async def get_account(request: web.Request) -> web.Response:
    account = _fake(request).accounts.get(request.match_info["id"])
    if account is None:
        return _missing("account")
    return web.json_response(account)


async def create_account_link(request: web.Request) -> web.Response:
    fake, params = _fake(request), request[PARAMS]
    if params.get("account") not in fake.accounts:
        return _error(400, "invalid_request_error", "No such account", "resource_missing")
    return web.json_response(
        {
            "object": "account_link",
            "url": f"{fake.base_url}/connect/setup/{params['account']}/{uuid.uuid4().hex[:8]}",
            "expires_at": int(time.time()) + 300,
            "return_url": params.get("return_url"),
            "refresh_url": params.get("refresh_url"),
        }
    )


async def create_login_link(request: web.Request) -> web.Response:
    fake = _fake(request)
    account_id = request.match_info["id"]
    if account_id not in fake.accounts:
        return _missing("account")
    return web.json_response(
        {"object": "login_link", "url": f"{fake.base_url}/express/{account_id}/dashboard"}
    )


async def create_payment_intent(request: web.Request) -> web.Response:
    fake, params = _fake(request), request[PARAMS]
    fake.charge_attempts += 1
    if fake.fail_charges:
        return _error(500, "api_error", "An unknown error occurred")
    amount = int(params.get("amount", "0"))
    if amount < 50:
        return _error(400, "invalid_request_error", "Amount must be at least $0.50 usd", "amount_too_small")
    if params.get("customer") not in fake.customers:
        return _error(400, "invalid_request_error", "No such customer", "resource_missing")
    destination = (params.get("transfer_data") or {}).get("destination")
    if destination is not None and destination not in fake.accounts:
        return _error(400, "invalid_request_error", "No such destination account", "resource_missing")
    intent = {
        "id": _id("pi"),
        "object": "payment_intent",
        "amount": amount,
        "currency": params.get("currency"),
        "customer": params["customer"],
        "payment_method": params.get("payment_method"),
        "application_fee_amount": int(params["application_fee_amount"])
        if "application_fee_amount" in params
        else None,
        "transfer_data": params.get("transfer_data"),
        "metadata": params.get("metadata", {}),
        "status": "succeeded",
        "idempotency_key": request.headers.get("Idempotency-Key"),
    }
    if params.get("payment_method") in fake.declined_methods:
        intent["status"] = "requires_payment_method"
        fake.payment_intents[intent["id"]] = intent
        return _error(
            402,
            "card_error",
            "Your card was declined.",
            "card_declined",
            decline_code="generic_decline",
            payment_intent=intent,
        )
    fake.payment_intents[intent["id"]] = intent
    key = request.headers.get("Idempotency-Key")
    if key:
        fake.idempotent[key] = (200, intent)
    if fake.hang_on_charge is not None and len(fake.payment_intents) == fake.hang_on_charge:
        await asyncio.sleep(3600)  # charged, but the answer never arrives
    return web.json_response(intent)


async def create_transfer(request: web.Request) -> web.Response:
    fake, params = _fake(request), request[PARAMS]
    if params.get("destination") not in fake.accounts:
        return _error(400, "invalid_request_error", "No such destination account", "resource_missing")
    transfer = {
        "id": _id("tr"),
        "object": "transfer",
        "amount": int(params.get("amount", "0")),
        "currency": params.get("currency"),
        "destination": params["destination"],
        "metadata": params.get("metadata", {}),
    }
    fake.transfers[transfer["id"]] = transfer
    return web.json_response(transfer)


async def get_payment_intent(request: web.Request) -> web.Response:
    intent = _fake(request).payment_intents.get(request.match_info["id"])
    if intent is None:
        return _missing("payment_intent")
    return web.json_response(intent)


async def create_checkout_session(request: web.Request) -> web.Response:
    fake, params = _fake(request), request[PARAMS]
    customer = params.get("customer")
    if customer is None:
        customer = _id("cus")
        fake.customers[customer] = {
            "id": customer,
            "object": "customer",
            "email": params.get("customer_email"),
        }
    session_id = _id("cs")
    session = {
        "id": session_id,
        "object": "checkout.session",
        "mode": params.get("mode"),
        "customer": customer,
        "client_reference_id": params.get("client_reference_id"),
        "metadata": params.get("metadata", {}),
        "subscription_data": params.get("subscription_data", {}),
        "payment_method_collection": params.get("payment_method_collection"),
        "line_items": params.get("line_items", []),
        "success_url": params.get("success_url"),
        "url": f"{fake.base_url}/checkout/{session_id}",
    }
    fake.checkout_sessions[session_id] = session
    return web.json_response(session)


async def create_portal_session(request: web.Request) -> web.Response:
    fake, params = _fake(request), request[PARAMS]
    if params.get("customer") not in fake.customers:
        return _error(400, "invalid_request_error", "No such customer", "resource_missing")
    return web.json_response(
        {
            "id": _id("bps"),
            "object": "billing_portal.session",
            "customer": params["customer"],
            "return_url": params.get("return_url"),
            "url": f"{fake.base_url}/portal/{params['customer']}",
        }
    )


def start_subscription(fake: FakeStripe, session_id: str, trial_days: int = 14) -> dict[str, Any]:
    """What completing a checkout does: a trialing subscription for the session's customer."""
    session = fake.checkout_sessions[session_id]
    now = int(time.time())
    subscription = {
        "id": _id("sub"),
        "object": "subscription",
        "customer": session["customer"],
        "status": "trialing",
        "trial_end": now + trial_days * 86400,
        "current_period_end": now + trial_days * 86400,
        "cancel_at_period_end": False,
        "metadata": (session.get("subscription_data") or {}).get("metadata", {}) or session["metadata"],
    }
    fake.subscriptions[subscription["id"]] = subscription
    session["subscription"] = subscription["id"]
    session["status"] = "complete"
    return subscription


async def update_subscription(request: web.Request) -> web.Response:
    fake, params = _fake(request), request[PARAMS]
    subscription = fake.subscriptions.get(request.match_info["id"])
    if subscription is None:
        return _missing("subscription")
    if "cancel_at_period_end" in params:
        subscription["cancel_at_period_end"] = params["cancel_at_period_end"] == "true"
    return web.json_response(subscription)


async def cancel_subscription(request: web.Request) -> web.Response:
    subscription = _fake(request).subscriptions.get(request.match_info["id"])
    if subscription is None:
        return _missing("subscription")
    subscription["status"] = "canceled"
    return web.json_response(subscription)


async def get_subscription(request: web.Request) -> web.Response:
    subscription = _fake(request).subscriptions.get(request.match_info["id"])
    if subscription is None:
        return _missing("subscription")
    return web.json_response(subscription)


async def get_balance(request: web.Request) -> web.Response:
    """The account's balance (zero amounts): the cheap authenticated read `svc doctor` makes."""
    zero = [{"amount": 0, "currency": "usd", "source_types": {"card": 0}}]
    return web.json_response({"object": "balance", "livemode": False, "available": zero, "pending": zero})


def create_app(fake: FakeStripe) -> web.Application:
    """The fake as an aiohttp application."""
    app = web.Application(middlewares=[authorise])
    app[FAKE] = fake
    app.router.add_post("/v1/customers", create_customer)
    app.router.add_post("/v1/setup_intents", create_setup_intent)
    app.router.add_post("/v1/accounts", create_account)
    app.router.add_get("/v1/accounts/{id}", get_account)
    app.router.add_post("/v1/accounts/{id}/login_links", create_login_link)
    app.router.add_post("/v1/account_links", create_account_link)
    app.router.add_post("/v1/payment_intents", create_payment_intent)
    app.router.add_get("/v1/payment_intents/{id}", get_payment_intent)
    app.router.add_post("/v1/transfers", create_transfer)
    app.router.add_post("/v1/checkout/sessions", create_checkout_session)
    app.router.add_post("/v1/billing_portal/sessions", create_portal_session)
    app.router.add_post("/v1/subscriptions/{id}", update_subscription)
    app.router.add_get("/v1/subscriptions/{id}", get_subscription)
    app.router.add_delete("/v1/subscriptions/{id}", cancel_subscription)
    app.router.add_get("/v1/balance", get_balance)
    return app
