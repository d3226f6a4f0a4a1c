"""The payment provider: every call goes through the `stripe` SDK, in one place.

The rest of the domain sees a small port (`PaymentProvider`) with the provider's
answers reduced to what it needs, and two failures: `PaymentDeclined` (the card
said no; nothing was charged) and `ProviderError` (the provider failed or could
not be reached; whether money moved is unknown, so the caller keeps its record
and retries with the same idempotency key). With no SVC_STRIPE_API_KEY the port
is absent and the payment endpoints answer 503.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

import stripe

from svc.core import BadGateway, BadRequest, Unavailable

if TYPE_CHECKING:
    from stripe.params import PaymentIntentCreateParams
    from stripe.params.checkout import SessionCreateParams

log = logging.getLogger(__name__)

NOT_CONFIGURED = "Payments are not configured"
CONNECT_DASHBOARD_URL = "https://dashboard.stripe.com/connect"
# A short client timeout: a hung provider must not hold a request (or the billing job) for minutes.
TIMEOUT_S = 30
NETWORK_RETRIES = 2
# How far a webhook's signed timestamp may be from our clock, either way (the provider's default).
WEBHOOK_TOLERANCE_S = 300


class PaymentDeclined(Exception):
    """The payment method was refused; nothing was charged."""

    def __init__(self, message: str, code: str | None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class PaymentPending(Exception):
    """The payment was accepted but has not settled yet (the provider's event will say)."""

    def __init__(self, payment_intent_id: str) -> None:
        super().__init__(payment_intent_id)
        self.payment_intent_id = payment_intent_id


class ProviderError(Exception):
    """The provider failed or was unreachable; the outcome of a charge is unknown."""


class ProviderRefused(ProviderError):
    """The provider refused the request before acting on it (a 4xx that is not a card's
    answer): nothing was charged, so the caller may release its claim at once. `busy` is a
    rate limit (try again shortly); otherwise the request itself was wrong."""

    def __init__(self, message: str, code: str | None, busy: bool) -> None:
        super().__init__(message)
        self.code = code
        self.busy = busy


class ConnectNotEnabled(Exception):
    """The platform account has no Connect (payout) feature."""


@dataclass(frozen=True)
class Charge:
    """A successful payment intent."""

    payment_intent_id: str
    amount_cents: int
    status: str


@dataclass(frozen=True)
class PayoutAccount:
    """A builder's connected account, reduced to the spec's status."""

    account_id: str
    status: str  # pending_onboarding | active | restricted


@dataclass(frozen=True)
class WebhookEvent:
    """A verified provider event."""

    id: str
    type: str
    data: dict[str, Any]


T = TypeVar("T")


async def provider_call(call: Awaitable[T]) -> T:
    """Await a provider call; a provider failure becomes a 502 with the provider's reason."""
    try:
        return await call
    except ProviderError as exc:
        raise BadGateway(str(exc)) from None


def unavailable() -> Unavailable:
    """The 503 of every payment endpoint when no provider is configured."""
    return Unavailable(NOT_CONFIGURED)


class PaymentProvider:
    """The provider's API, through `stripe.StripeClient` (async calls over httpx)."""

    def __init__(self, api_key: str, api_base: str | None, webhook_secret: str | None) -> None:
        self.webhook_secret = webhook_secret
        self.client = stripe.StripeClient(
            api_key,
            base_addresses={"api": api_base} if api_base else None,
            http_client=stripe.HTTPXClient(timeout=TIMEOUT_S),
            max_network_retries=NETWORK_RETRIES,
        )

    # ---- deployers -------------------------------------------------------------------

    async def setup_intent(self, email: str) -> tuple[str, str]:
        """A customer for the email and an off-session setup intent: (client secret, customer id)."""
        async with _translated():
            customer = await self.client.v1.customers.create_async({"email": email})
            intent = await self.client.v1.setup_intents.create_async(
                {"customer": customer.id, "usage": "off_session"}
            )
        return str(intent.client_secret), customer.id

    async def charge(
        self,
        *,
        amount_cents: int,
        customer_id: str,
        payment_method_id: str,
        fee_cents: int,
        destination: str | None,
        idempotency_key: str,
        metadata: dict[str, str],
        description: str,
    ) -> Charge:
        """An off-session, confirmed payment; the fee stays, the rest goes to `destination`."""
        params: PaymentIntentCreateParams = {
            "amount": amount_cents,
            "currency": "usd",
            "customer": customer_id,
            "payment_method": payment_method_id,
            # Never a redirect: with the API's default (automatic methods, redirects allowed)
            # confirming may require a `return_url`, and nobody is there off-session. (This API
            # version has no `payment_method_types` on create; the description says so.)
            "automatic_payment_methods": {"enabled": True, "allow_redirects": "never"},
            "off_session": True,
            "confirm": True,
            "description": description,
            "metadata": metadata,
        }
        if destination is not None:
            params["application_fee_amount"] = fee_cents
            params["transfer_data"] = {"destination": destination}
        async with _translated():
            intent = await self.client.v1.payment_intents.create_async(
                params, {"idempotency_key": idempotency_key}
            )
        answer = intent.to_dict()
        status = answer.get("status")
        if (
            not isinstance(answer.get("id"), str)
            or not isinstance(status, str)
            or answer.get("amount") != amount_cents
            or answer.get("currency") != "usd"
        ):
            # Not an answer the API gives for this request: fail closed (nothing is marked paid;
            # the invoice keeps its claim and key for a resume or an operator).
            log.error(
                "payment provider answer did not match the request",
                extra={"idempotencyKey": idempotency_key, "answerStatus": str(status)},
            )
            raise ProviderError("The payment provider's answer did not match the request")
        if status == "processing":
            raise PaymentPending(answer["id"])
        if status != "succeeded":
            raise PaymentDeclined(f"The payment needs {status.replace('_', ' ')}", status)
        return Charge(answer["id"], amount_cents, status)

    async def transfer(
        self, *, amount_cents: int, destination: str, idempotency_key: str, metadata: dict[str, str]
    ) -> str:
        """Move a held builder share from the platform balance to the builder's account; its id."""
        async with _translated():
            transfer = await self.client.v1.transfers.create_async(
                {"amount": amount_cents, "currency": "usd", "destination": destination, "metadata": metadata},
                {"idempotency_key": idempotency_key},
            )
        answer = transfer.to_dict()
        if not isinstance(answer.get("id"), str) or answer.get("amount") != amount_cents:
            log.error(
                "payment provider transfer answer did not match the request",
                extra={"idempotencyKey": idempotency_key},
            )
            raise ProviderError("The payment provider's answer did not match the request")
        return str(answer["id"])

    # ---- builders (Connect) ------------------------------------------------------------

    async def create_payout_account(self, email: str, user_id: str) -> str:
        """An Express connected account for a builder; ConnectNotEnabled without Connect."""
        async with _translated():
            account = await self.client.v1.accounts.create_async(
                {
                    "type": "express",
                    "email": email,
                    "capabilities": {"transfers": {"requested": True}},
                    "metadata": {"userId": user_id},
                }
            )
        return account.id

    async def onboarding_link(self, account_id: str, return_url: str) -> str:
        """A one-time onboarding URL (re-calling it resumes onboarding)."""
        async with _translated():
            link = await self.client.v1.account_links.create_async(
                {
                    "account": account_id,
                    "type": "account_onboarding",
                    "return_url": return_url,
                    "refresh_url": return_url,
                }
            )
        return str(link.url)

    async def payout_account(self, account_id: str) -> PayoutAccount:
        """The account's current status."""
        async with _translated():
            account = await self.client.v1.accounts.retrieve_async(account_id)
        return PayoutAccount(account_id, payout_status(account.to_dict()))

    async def dashboard_link(self, account_id: str) -> str:
        """A login link to the builder's Express dashboard."""
        async with _translated():
            link = await self.client.v1.accounts.login_links.create_async(account_id)
        return str(link.url)

    # ---- org subscriptions -------------------------------------------------------------

    async def checkout(
        self,
        *,
        org_id: str,
        customer_id: str | None,
        email: str | None,
        price: dict[str, Any],
        trial_days: int,
        success_url: str,
        cancel_url: str,
    ) -> str:
        """A subscription checkout with a free trial and a card required; its URL."""
        params: dict[str, Any] = {
            "mode": "subscription",
            "client_reference_id": org_id,
            "line_items": [{**price, "quantity": 1}],
            "payment_method_collection": "always",
            "subscription_data": {"metadata": {"orgId": org_id}}
            | ({"trial_period_days": trial_days} if trial_days else {}),
            "metadata": {"orgId": org_id},
            "success_url": success_url,
            "cancel_url": cancel_url,
        }
        if customer_id:
            params["customer"] = customer_id
        elif email:
            params["customer_email"] = email
        async with _translated():
            # A plan's price from the settings is a line item built here, not a typed one.
            session = await self.client.v1.checkout.sessions.create_async(cast("SessionCreateParams", params))
        return str(session.url)

    async def portal(self, customer_id: str, return_url: str) -> str:
        """A billing-portal URL for the customer."""
        async with _translated():
            session = await self.client.v1.billing_portal.sessions.create_async(
                {"customer": customer_id, "return_url": return_url}
            )
        return str(session.url)

    async def subscription(self, subscription_id: str) -> dict[str, Any]:
        """The subscription as the provider holds it."""
        async with _translated():
            subscription = await self.client.v1.subscriptions.retrieve_async(subscription_id)
        return subscription.to_dict()

    async def cancel_now(self, subscription_id: str) -> None:
        """End a subscription at once (a duplicate one: nothing was used)."""
        async with _translated():
            await self.client.v1.subscriptions.cancel_async(subscription_id)

    async def cancel_at_period_end(self, subscription_id: str) -> dict[str, Any]:
        """Schedule the subscription's end; the updated subscription."""
        async with _translated():
            subscription = await self.client.v1.subscriptions.update_async(
                subscription_id, {"cancel_at_period_end": True}
            )
        return subscription.to_dict()

    # ---- webhooks ----------------------------------------------------------------------

    def verify(self, payload: bytes, signature: str | None) -> WebhookEvent:
        """The event, if the signature matches the webhook secret (the provider's scheme)."""
        if not self.webhook_secret:
            raise Unavailable("The payment webhook secret is not configured")
        if not signature:
            raise BadRequest("Missing Stripe-Signature header")
        # The SDK refuses timestamps older than the tolerance but not ones from the future: a
        # signature made for later could be replayed for longer. Both sides are held to it.
        stamp = _signed_at(signature)
        if stamp is not None and stamp > time.time() + WEBHOOK_TOLERANCE_S:
            raise BadRequest("Invalid webhook signature: the timestamp is in the future")
        try:
            event = self.client.construct_event(
                payload, signature, self.webhook_secret, tolerance=WEBHOOK_TOLERANCE_S
            )
        except stripe.SignatureVerificationError:
            raise BadRequest("Invalid webhook signature") from None
        except ValueError:
            raise BadRequest("Invalid webhook payload") from None
        return WebhookEvent(event.id, event.type, event.data.object.to_dict())


def _signed_at(signature: str) -> int | None:
    """The `t=` of a Stripe-Signature header, if it has a well-formed one."""
    for item in signature.split(","):
        key, _, value = item.strip().partition("=")
        if key == "t" and value.isdigit() and len(value) < 16:
            return int(value)
    return None


def payout_status(account: dict[str, Any]) -> str:
    """The spec's payout status of a provider account object."""
    requirements = account.get("requirements") or {}
    if requirements.get("disabled_reason"):
        return "restricted"
    if account.get("charges_enabled") and account.get("payouts_enabled"):
        return "active"
    if account.get("details_submitted"):
        return "restricted"
    return "pending_onboarding"


class _translated:
    """Turn the SDK's errors into the port's: declined, Connect missing, or provider failure."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None, _tb: Any) -> bool:
        if exc is None or not isinstance(exc, stripe.StripeError):
            return False
        if isinstance(exc, stripe.CardError):
            raise PaymentDeclined(exc.user_message or "The card was declined", exc.code) from None
        message = exc.user_message or ""
        if isinstance(exc, stripe.InvalidRequestError) and "signed up for Connect" in message:
            raise ConnectNotEnabled() from None
        log.warning(
            "payment provider call failed: %s (status %s, code %s)",
            type(exc).__name__,
            exc.http_status,
            exc.code,
        )
        reason = message or type(exc).__name__
        if isinstance(exc, stripe.RateLimitError):
            raise ProviderRefused(
                f"The payment provider is busy: {reason}", exc.code or "rate_limit", busy=True
            ) from None
        if isinstance(exc, REFUSED):
            # Refused before anything happened (the provider keeps no idempotent result for it).
            raise ProviderRefused(
                f"The payment provider refused the request: {reason}", exc.code, busy=False
            ) from None
        # 5xx or no answer: whether it acted is unknown (the SDK already retried with the same key).
        raise ProviderError(f"The payment provider failed; the outcome is unknown: {reason}") from None


# 4xx answers that say nothing was done. An IdempotencyError is not one of them: the key's
# first request may have charged.
REFUSED = (stripe.InvalidRequestError, stripe.AuthenticationError, stripe.PermissionError)
