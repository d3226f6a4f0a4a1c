"""A fake of the payment provider's HTTP API (Stripe's wire format) for billing tests.

`create_app(FakeStripe())` serves the `/v1` endpoints the service calls through the
`stripe` SDK: form-encoded bodies with bracketed nesting (`transfer_data[destination]`),
JSON answers with `id` and `object`, errors as `{error: {type, code, message}}`, and
the `Idempotency-Key` header honoured the way Stripe does: a repeated key replays the
first answer and never creates a second object.

Every request is checked against the provider's published API description
(tests/fakes/stripe_contract.py): a parameter the real API does not take is answered
400 as Stripe answers it, and every answer and every event object the fake produces is
checked too. Anything found is kept in `violations`; the fake's server refuses to shut
down cleanly while any is left, so the test fails at teardown.

Switches: `connect_enabled=False` refuses account creation as a platform without
Connect does; `declined_methods` answer 402 `card_declined`; `hang_on_charge=N` stores
the Nth payment intent, then never answers (the caller's process "crashes" while it
waits); `fail_charges` answers 500 without charging; `charge_error` answers the next
charges with one provider error class (`authentication_required`, `invalid_request`,
`rate_limited`, `api_error`); `drop_charge_answers=N` charges, then drops the
connection instead of answering, N times (the outcome is unknown to the caller);
`fail_transfers` declines transfers as an account without funds does; `transfers_down`
answers transfers 500 without transferring; `drop_transfer_answers=N` transfers, then drops
the connection instead of answering, N times; `rate_limit_transfers` answers transfers 429.
`keys` records each POST's path and `Idempotency-Key` (Stripe does not return it).
`sign(payload)` produces a `Stripe-Signature` header for webhook tests.
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

from tests.fakes.stripe_contract import check_object, check_request, check_response

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
    charge_error: str | None = None
    drop_charge_answers: int = 0
    fail_transfers: bool = False
    transfers_down: bool = False
    drop_transfer_answers: int = 0
    rate_limit_transfers: bool = False
    # Fields laid over every payment intent answer (an answer the API description does not allow).
    intent_answer_override: dict[str, Any] = field(default_factory=dict)
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
    # The Idempotency-Key each payment intent was created with (Stripe does not return it).
    intent_keys: dict[str, str | None] = field(default_factory=dict)
    # What each checkout session was created with (Stripe does not echo most of it).
    checkout_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    keys: list[tuple[str, str | None]] = field(default_factory=list)
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

    def event(self, kind: str, obj: dict[str, Any], event_id: str | None = None) -> bytes:
        """A webhook event payload of this type about this object (checked against the description)."""
        component = _EVENT_COMPONENTS.get(kind.rsplit(".", 1)[0])
        if component is not None:
            self.violations.extend(check_object(component, obj))
        return json.dumps(
            {
                "id": event_id or _id("evt"),
                "object": "event",
                "type": kind,
                "created": int(time.time()),
                "livemode": False,
                "api_version": API_VERSION,
                "data": {"object": obj},
            }
        ).encode()


# The object a webhook event of each type prefix carries.
_EVENT_COMPONENTS = {
    "payment_intent": "payment_intent",
    "account": "account",
    "customer.subscription": "subscription",
    "checkout.session": "checkout.session",
    "transfer": "transfer",
}
API_VERSION = "2026-10-28.endive"  # what the stripe SDK sends (checked in tests/test_payment_contract.py)


FAKE = web.AppKey("fake", FakeStripe)
PARAMS = web.RequestKey("params", dict)


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def decode_form(body: str) -> dict[str, Any]:
    """`a[b][c]=1&l[0][p]=x&e[0]=y` → {"a": {"b": {"c": "1"}}, "l": [{"p": "x"}], "e": ["y"]}
    (Stripe's encoding: brackets nest objects, numeric brackets index lists)."""
    result: dict[str, Any] = {}
    for key, value in parse_qsl(body, keep_blank_values=True):
        parts = key.replace("]", "").split("[")
        node: dict[str, Any] = result
        for part, _following in itertools.pairwise(parts):
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return dict(_lists(result))


def _lists(node: Any) -> Any:
    """Objects whose keys are all list indexes become lists, in index order."""
    if not isinstance(node, dict):
        return node
    items = {key: _lists(value) for key, value in node.items()}
    if items and all(key.isdigit() for key in items):
        return [items[key] for key in sorted(items, key=int)]
    return items


def _error(status: int, kind: str, message: str, code: str | None = None, **extra: Any) -> web.Response:
    """Stripe's error body: fields without a value are left out, as Stripe leaves them out."""
    error = {"type": kind, "message": message, "code": code, **extra}
    return web.json_response({"error": {k: v for k, v in error.items() if v is not None}}, status=status)


def _missing(name: str) -> web.Response:
    return _error(404, "invalid_request_error", f"No such {name}", "resource_missing")


def _fake(request: web.Request) -> FakeStripe:
    return request.app[FAKE]


@web.middleware
async def authorise(request: web.Request, handler: Any) -> web.StreamResponse:
    """Check the secret key and the request's shape, record it, replay idempotent POSTs,
    and check the answer against the API description."""
    fake = _fake(request)
    params = (
        decode_form(await request.text()) if request.method == "POST" else decode_form(request.query_string)
    )
    fake.requests.append((request.method, request.path, params))
    if request.headers.get("Authorization") != f"Bearer {fake.api_key}":
        return _error(401, "invalid_request_error", "Invalid API Key provided")
    refused = check_request(request.method, request.path, params)
    if refused:
        # Stripe refuses such a request (400) before doing anything; the test fails at teardown.
        fake.violations.extend(refused)
        return _error(400, "invalid_request_error", refused[0], "parameter_unknown")
    request[PARAMS] = params
    key = request.headers.get("Idempotency-Key")
    if request.method == "POST":
        fake.keys.append((request.path, key))
    if request.method == "POST" and key and key in fake.idempotent:
        status, body = fake.idempotent[key]
        response: web.StreamResponse = web.json_response(
            body, status=status, headers={"Idempotent-Replayed": "true"}
        )
    else:
        response = await handler(request)
    if request.path == "/v1/payment_intents" and fake.drop_charge_answers > 0:
        fake.drop_charge_answers -= 1
        assert request.transport is not None
        request.transport.abort()  # done (or replayed), then the connection drops: the caller cannot know
        raise asyncio.CancelledError
    if request.path == "/v1/transfers" and fake.drop_transfer_answers > 0:
        fake.drop_transfer_answers -= 1
        assert request.transport is not None
        request.transport.abort()  # transferred (or replayed), but the answer is lost
        raise asyncio.CancelledError
    if response.headers.get("Idempotent-Replayed"):
        return response
    if isinstance(response, web.Response) and response.text is not None:
        fake.violations.extend(
            check_response(request.method, request.path, response.status, json.loads(response.text))
        )
    if request.method == "POST" and key and isinstance(response, web.Response) and response.status < 500:
        if response.status != 429 and response.text is not None:  # a rate-limited request never ran
            fake.idempotent[key] = (response.status, json.loads(response.text))
    return response


def _now() -> int:
    return int(time.time())


async def create_customer(request: web.Request) -> web.Response:
    params = request[PARAMS]
    customer = {
        "id": _id("cus"),
        "object": "customer",
        "email": params.get("email"),
        "created": _now(),
        "livemode": False,
        "metadata": params.get("metadata", {}),
    }
    _fake(request).customers[customer["id"]] = customer
    return web.json_response(customer)


async def create_setup_intent(request: web.Request) -> web.Response:
    params = request[PARAMS]
    fake = _fake(request)
    if params.get("customer") not in fake.customers:
        return _error(400, "invalid_request_error", "No such customer", "resource_missing", param="customer")
    intent_id = _id("seti")
    intent = {
        "id": intent_id,
        "object": "setup_intent",
        "client_secret": f"{intent_id}_secret_{uuid.uuid4().hex[:16]}",
        "created": _now(),
        "livemode": False,
        "customer": params["customer"],
        "usage": params.get("usage", "off_session"),
        "payment_method_types": ["card"],
        "status": "requires_payment_method",
        "metadata": {},
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
        "created": _now(),
        "charges_enabled": False,
        "payouts_enabled": False,
        "details_submitted": False,
        "requirements": {
            "disabled_reason": None,
            "currently_due": ["external_account"],
            "eventually_due": ["external_account"],
            "past_due": [],
            "pending_verification": [],
            "errors": [],
        },
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
        return _error(400, "invalid_request_error", "No such account", "resource_missing", param="account")
    return web.json_response(
        {
            "object": "account_link",
            "created": _now(),
            "url": f"{fake.base_url}/connect/setup/{params['account']}/{uuid.uuid4().hex[:8]}",
            "expires_at": _now() + 300,
        }
    )


async def create_login_link(request: web.Request) -> web.Response:
    fake = _fake(request)
    account_id = request.match_info["id"]
    if account_id not in fake.accounts:
        return _missing("account")
    return web.json_response(
        {"object": "login_link", "created": _now(), "url": f"{fake.base_url}/express/{account_id}/dashboard"}
    )


# The answers of `charge_error`: (status, error type, code, message), as Stripe sends them.
CHARGE_ERRORS: dict[str, tuple[int, str, str | None, str]] = {
    "authentication_required": (
        402,
        "card_error",
        "authentication_required",
        "Your card was declined. This transaction requires authentication.",
    ),
    "invalid_request": (
        400,
        "invalid_request_error",
        "payment_method_unexpected_state",
        "The PaymentMethod provided was previously used and detached; it cannot be used again.",
    ),
    "rate_limited": (
        429,
        "invalid_request_error",
        "rate_limit",
        "Too many requests made to the API too quickly",
    ),
    "api_error": (500, "api_error", None, "An unknown error occurred"),
}


async def create_payment_intent(request: web.Request) -> web.StreamResponse:
    fake, params = _fake(request), request[PARAMS]
    fake.charge_attempts += 1
    if fake.fail_charges:
        return _error(500, "api_error", "An unknown error occurred")
    if fake.charge_error is not None:
        status, kind, code, message = CHARGE_ERRORS[fake.charge_error]
        if kind != "card_error":
            return _error(status, kind, message, code)
    amount = int(params.get("amount", "0"))
    if amount < 50:
        return _error(400, "invalid_request_error", "Amount must be at least $0.50 usd", "amount_too_small")
    if params.get("customer") not in fake.customers:
        return _error(400, "invalid_request_error", "No such customer", "resource_missing", param="customer")
    destination = (params.get("transfer_data") or {}).get("destination")
    if destination is not None and destination not in fake.accounts:
        return _error(400, "invalid_request_error", "No such destination account", "resource_missing")
    automatic = params.get("automatic_payment_methods")
    # Since 2023-08-16, with neither `payment_method_types` nor `automatic_payment_methods` the
    # API turns automatic payment methods on, redirect-based ones included.
    redirects_allowed = (automatic is None and "payment_method_types" not in params) or (
        automatic is not None and automatic.get("allow_redirects") != "never"
    )
    if params.get("confirm") == "true" and redirects_allowed and not params.get("return_url"):
        # What Stripe says when redirect-based methods are allowed and nowhere to return to.
        return _error(
            400,
            "invalid_request_error",
            "This PaymentIntent is configured to accept payment methods enabled in your Dashboard, "
            "because some of these payment methods might redirect your customer off of your page, "
            "you must provide a `return_url`.",
            "parameter_missing",
            param="return_url",
        )
    intent_id = _id("pi")
    intent = {
        "id": intent_id,
        "object": "payment_intent",
        "amount": amount,
        "amount_capturable": 0,
        "amount_received": amount,
        "created": _now(),
        "livemode": False,
        "capture_method": "automatic",
        "confirmation_method": "automatic",
        "client_secret": f"{intent_id}_secret_{uuid.uuid4().hex[:16]}",
        "currency": params.get("currency"),
        "customer": params["customer"],
        "description": params.get("description"),
        "payment_method": params.get("payment_method"),
        "payment_method_types": params.get("payment_method_types", ["card"]),
        "automatic_payment_methods": None
        if automatic is None
        else {
            "enabled": automatic.get("enabled") == "true",
            "allow_redirects": automatic.get("allow_redirects"),
        },
        "application_fee_amount": int(params["application_fee_amount"])
        if "application_fee_amount" in params
        else None,
        "transfer_data": params.get("transfer_data"),
        "metadata": params.get("metadata", {}),
        "status": "succeeded",
    }
    key = request.headers.get("Idempotency-Key")
    fake.intent_keys[intent_id] = key
    declined = params.get("payment_method") in fake.declined_methods
    if declined or fake.charge_error == "authentication_required":
        status, kind, code, message = (
            CHARGE_ERRORS["authentication_required"]
            if fake.charge_error
            else (402, "card_error", "card_declined", "Your card was declined.")
        )
        intent.update(status="requires_payment_method", amount_received=0)
        intent["last_payment_error"] = {"type": kind, "code": code, "message": message}
        fake.payment_intents[intent_id] = intent
        return _error(
            status,
            kind,
            message,
            code,
            decline_code=code if code == "authentication_required" else "generic_decline",
            payment_intent=intent,
        )
    intent.update(fake.intent_answer_override)
    fake.payment_intents[intent_id] = intent
    if key:
        fake.idempotent[key] = (200, intent)
    if fake.hang_on_charge is not None and len(fake.payment_intents) == fake.hang_on_charge:
        await asyncio.sleep(3600)  # charged, but the answer never arrives
    return web.json_response(intent)


async def create_transfer(request: web.Request) -> web.Response:
    fake, params = _fake(request), request[PARAMS]
    if params.get("destination") not in fake.accounts:
        return _error(400, "invalid_request_error", "No such destination account", "resource_missing")
    if fake.transfers_down:
        return _error(500, "api_error", "An error occurred with our connection to Stripe.")
    if fake.rate_limit_transfers:
        return _error(
            429, "invalid_request_error", "Too many requests made to the API too quickly", "rate_limit"
        )
    if fake.fail_transfers:
        return _error(
            400,
            "invalid_request_error",
            "You have insufficient available funds in your Stripe account.",
            "balance_insufficient",
        )
    transfer = {
        "id": _id("tr"),
        "object": "transfer",
        "amount": int(params.get("amount", "0")),
        "amount_reversed": 0,
        "created": _now(),
        "livemode": False,
        "currency": params.get("currency"),
        "destination": params["destination"],
        "metadata": params.get("metadata", {}),
        "reversed": False,
        "reversals": {"object": "list", "data": [], "has_more": False, "url": "/v1/transfers/reversals"},
    }
    fake.transfers[transfer["id"]] = transfer
    key = request.headers.get("Idempotency-Key")
    if key:  # kept here too: an answer dropped on the way back still replays (as Stripe does)
        fake.idempotent[key] = (200, transfer)
    return web.json_response(transfer)


def reverse_transfer(fake: FakeStripe, transfer_id: str) -> dict[str, Any]:
    """What a full reversal does to a transfer (sent to us as `transfer.reversed`)."""
    transfer = fake.transfers[transfer_id]
    transfer.update(reversed=True, amount_reversed=transfer["amount"])
    return transfer


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
            "created": _now(),
            "livemode": False,
            "metadata": {},
        }
    session_id = _id("cs")
    session = {
        "id": session_id,
        "object": "checkout.session",
        "created": _now(),
        "expires_at": _now() + 86400,
        "livemode": False,
        "mode": params.get("mode"),
        "customer": customer,
        "client_reference_id": params.get("client_reference_id"),
        "metadata": params.get("metadata", {}),
        "payment_method_collection": params.get("payment_method_collection"),
        "payment_status": "unpaid",
        "status": "open",
        "subscription": None,
        "success_url": params.get("success_url"),
        "cancel_url": params.get("cancel_url"),
        "url": f"{fake.base_url}/checkout/{session_id}",
    }
    fake.checkout_sessions[session_id] = session
    fake.checkout_params[session_id] = params
    return web.json_response(session)


async def create_portal_session(request: web.Request) -> web.Response:
    fake, params = _fake(request), request[PARAMS]
    if params.get("customer") not in fake.customers:
        return _error(400, "invalid_request_error", "No such customer", "resource_missing", param="customer")
    return web.json_response(
        {
            "id": _id("bps"),
            "object": "billing_portal.session",
            "created": _now(),
            "livemode": False,
            "customer": params["customer"],
            "return_url": params.get("return_url"),
            "url": f"{fake.base_url}/portal/{params['customer']}",
        }
    )


def start_subscription(
    fake: FakeStripe, session_id: str, trial_days: int = 14, status: str | None = None
) -> dict[str, Any]:
    """What completing a checkout does: a (trialing) subscription for the session's customer.

    `status` sets another starting status (`incomplete` while a first payment needs action)."""
    session = fake.checkout_sessions[session_id]
    created = fake.checkout_params.get(session_id, {})
    now = _now()
    end = now + (trial_days or 30) * 86400
    subscription_id = _id("sub")
    subscription = {
        "id": subscription_id,
        "object": "subscription",
        "created": now,
        "start_date": now,
        "livemode": False,
        "customer": session["customer"],
        "status": status or ("trialing" if trial_days else "active"),
        "trial_start": now if trial_days else None,
        "trial_end": end if trial_days else None,
        "cancel_at_period_end": False,
        "collection_method": "charge_automatically",
        "currency": "usd",
        "items": {
            "object": "list",
            "data": [
                {
                    "id": _id("si"),
                    "object": "subscription_item",
                    "current_period_start": now,
                    "current_period_end": end,
                }
            ],
            "has_more": False,
            "url": f"/v1/subscription_items?subscription={subscription_id}",
        },
        "metadata": (created.get("subscription_data") or {}).get("metadata", {}) or session["metadata"],
    }
    fake.subscriptions[subscription["id"]] = subscription
    session.update(subscription=subscription["id"], status="complete", payment_status="paid")
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
    subscription.update(status="canceled", canceled_at=_now(), ended_at=_now())
    return web.json_response(subscription)


async def get_subscription(request: web.Request) -> web.Response:
    subscription = _fake(request).subscriptions.get(request.match_info["id"])
    if subscription is None:
        return _missing("subscription")
    return web.json_response(subscription)


async def _no_violations_left(app: web.Application) -> None:
    """Shutting down with contract violations fails the test (at its teardown)."""
    fake = app[FAKE]
    if fake.violations:
        found, fake.violations = list(fake.violations), []
        raise AssertionError(
            "the fake payment provider saw or said what the real API does not:\n" + "\n".join(found)
        )


async def get_balance(request: web.Request) -> web.Response:
    """The account's balance (zero amounts): the cheap authenticated read `svc doctor` makes."""
    zero = [{"amount": 0, "currency": "usd", "source_types": {"card": 0}}]
    return web.json_response({"object": "balance", "livemode": False, "available": zero, "pending": zero})


def create_app(fake: FakeStripe) -> web.Application:
    """The fake as an aiohttp application."""
    app = web.Application(middlewares=[authorise])
    app[FAKE] = fake
    app.on_cleanup.append(_no_violations_left)
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
