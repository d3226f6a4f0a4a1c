"""Deployer payment methods and builder payout accounts (Connect), and provider webhooks.

A builder's payout account is kept on the user as `payout: {accountId, status}`;
the status is refreshed when the builder asks for it and when the provider sends
`account.updated`. Charges route the builder's share only to an `active` account.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from urllib.parse import urlsplit

from pydantic import Field, field_validator
from pymongo.errors import DuplicateKeyError

from svc.billing.charges import Charges
from svc.billing.payments import (
    CONNECT_DASHBOARD_URL,
    ConnectNotEnabled,
    PaymentProvider,
    WebhookEvent,
    payout_status,
    provider_call,
    unavailable,
)
from svc.core import Conflict, Document, NotFound, RequestBody, Store, Unprocessable, utcnow
from svc.identity import EMAIL_PATTERN, Accounts, find_user

log = logging.getLogger(__name__)

SubscriptionHandler = Callable[[WebhookEvent], Awaitable[None]]
# How long a claimed event may stay unapplied before a redelivery takes it over.
EVENT_LEASE = timedelta(minutes=5)


class SetupIntentBody(RequestBody):
    """POST /api/stripe/setup-intent."""

    email: str = Field(max_length=254)

    @field_validator("email")
    @classmethod
    def _email(cls, value: str) -> str:
        if not EMAIL_PATTERN.fullmatch(value.strip().lower()):
            raise ValueError("not a valid email address")
        return value.strip().lower()


class OnboardBody(RequestBody):
    """POST /api/stripe/connect/onboard."""

    returnUrl: str = Field(min_length=1, max_length=2000)

    @field_validator("returnUrl")
    @classmethod
    def _http(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("returnUrl must be an http(s) URL")
        return value


class Payouts:
    """Setup intents for deployers, Connect onboarding for builders, provider events."""

    def __init__(
        self,
        store: Store,
        accounts: Accounts,
        charges: Charges,
        provider: PaymentProvider | None,
        subscription_handler: SubscriptionHandler | None = None,
    ) -> None:
        self.store = store
        self.accounts = accounts
        self.charges = charges
        self.provider = provider
        # Subscription events go to the org plans (svc.billing.org_billing).
        self.subscription_handler = subscription_handler

    def _require_provider(self) -> PaymentProvider:
        if self.provider is None:
            raise unavailable()
        return self.provider

    async def setup_intent(self, body: SetupIntentBody) -> Document:
        """A customer and a setup intent; the confirmed method is attached to the install later."""
        client_secret, customer_id = await provider_call(self._require_provider().setup_intent(body.email))
        # Installs may name only customers created here, for the same email.
        await self.store["pay_customers"].insert_one(
            {"_id": customer_id, "email": body.email, "createdAt": utcnow()}
        )
        return {"clientSecret": client_secret, "customerId": customer_id}

    async def onboard(self, user_id: str, body: OnboardBody) -> Document:
        """A one-time onboarding URL; creates the payout account on first use."""
        provider = self._require_provider()
        user = await self._user(user_id)
        account_id: str | None = (user.get("payout") or {}).get("accountId")
        if account_id is None:
            try:
                account_id = await provider_call(provider.create_payout_account(user["email"], user_id))
            except ConnectNotEnabled:
                raise Unprocessable(
                    "Payouts are not enabled on the platform's payment account (Connect enrollment "
                    "is required)",
                    code="connect_enrollment_required",
                    dashboardUrl=CONNECT_DASHBOARD_URL,
                ) from None
            # Two racing first calls: the first account written wins; the other is left unused.
            await self.accounts.set_payout_account(user_id, account_id)
            user = await self._user(user_id)
            account_id = user["payout"]["accountId"]
        return {"url": await provider_call(provider.onboarding_link(account_id, body.returnUrl))}

    async def status(self, user_id: str) -> Document:
        """not_connected, pending_onboarding, restricted, or active with a dashboard link."""
        provider = self._require_provider()
        account_id = ((await self._user(user_id)).get("payout") or {}).get("accountId")
        if account_id is None:
            return {"status": "not_connected"}
        account = await provider_call(provider.payout_account(account_id))
        # A read: it stores what it saw, and never moves money (the provider's account event,
        # and the monthly job, pay held shares out).
        await self.accounts.set_payout_status(account_id, account.status, user_id)
        if account.status != "active":
            return {"status": account.status}
        return {"status": "active", "dashboardUrl": await provider_call(provider.dashboard_link(account_id))}

    async def _user(self, user_id: str) -> Document:
        user = await find_user(self.store, user_id, "email", "payout")
        if user is None:
            raise NotFound("User not found")
        return user

    # ---- POST /api/stripe/webhook --------------------------------------------------------

    async def webhook(self, payload: bytes, signature: str | None) -> Document:
        """Verify, claim the event id, apply, mark done: each event is applied once.

        The claim is a unique insert, so of two concurrent deliveries one applies and the
        other is told to come back (409: the provider redelivers later and then finds it
        done). A process that dies between claim and done leaves a claim that a redelivery
        takes over once EVENT_LEASE has passed; one whose apply fails drops its claim.
        """
        event = self._require_provider().verify(payload, signature)
        events = self.store["payment_events"]
        now = utcnow()
        try:
            await events.insert_one(
                {
                    "_id": event.id,
                    "type": event.type,
                    "status": "applying",
                    "claimedAt": now,
                    "receivedAt": now,
                }
            )
        except DuplicateKeyError:
            taken = await events.find_one_and_update(
                {"_id": event.id, "status": "applying", "claimedAt": {"$lt": now - EVENT_LEASE}},
                {"$set": {"claimedAt": now}},
            )
            if taken is None:
                record = await events.find_one({"_id": event.id}, {"status": 1})
                if record is None or record.get("status", "done") == "done":
                    return {"received": True}  # a redelivery: applied before, nothing changes
                raise Conflict("This event is being processed; deliver it again later") from None
        try:
            await self._apply(event)
        except BaseException:
            await events.delete_one({"_id": event.id, "status": "applying", "claimedAt": now})
            raise
        await events.update_one({"_id": event.id}, {"$set": {"status": "done", "doneAt": utcnow()}})
        return {"received": True}

    async def _apply(self, event: WebhookEvent) -> None:
        obj = event.data
        if event.type in ("payment_intent.succeeded", "payment_intent.payment_failed"):
            await self.charges.payment_settled(obj, event.type == "payment_intent.succeeded")
        elif event.type == "account.updated" and isinstance(obj.get("id"), str):
            user = await self.accounts.set_payout_status(obj["id"], payout_status(obj))
            if user is not None and payout_status(obj) == "active":
                await self.charges.builders.requeue_declined(user["_id"])
                await self.charges.pay_out_held(user["_id"])
        elif event.type == "transfer.reversed":
            await self.charges.builders.transfer_reversed(obj)
        elif event.type.startswith(("customer.subscription.", "checkout.session.")):
            if self.subscription_handler is not None:
                await self.subscription_handler(event)
        else:
            log.info("payment event ignored", extra={"eventType": event.type})
