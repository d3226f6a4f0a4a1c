"""Org plans through the payment provider: checkout, portal, cancel, and subscription events.

The provider owns the subscription; the org document mirrors it. Every change of plan
goes through `Plans.apply_subscription` (one place derives the plan from the status),
fed by the provider's webhook events. Checkout starts a Pro subscription with a
14-day trial and a card required; cancel only schedules the end of the period.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from config.settings import Settings
from svc.billing.payments import PaymentProvider, ProviderError, WebhookEvent, provider_call, unavailable
from svc.core import Conflict, Document, Store
from svc.orgs import SYSTEM, AuditLog, OrgAccess, Plans, find_org, org_id_where

log = logging.getLogger(__name__)

TRIAL_DAYS = 14
LIVE = ("active", "trialing", "past_due")
# The provider's subscription statuses, as the spec's org subscription status.
STATUS_MAP: dict[str, str | None] = {
    "active": "active",
    "trialing": "trialing",
    "past_due": "past_due",
    "unpaid": "past_due",
    "canceled": "cancelled",
    "incomplete_expired": "cancelled",
    "incomplete": None,
    "paused": None,
}
# Provider statuses of a subscription that does not pay for the org (nothing owed, no plan): a
# new checkout's subscription replaces it instead of being taken for a duplicate.
REPLACEABLE = ("incomplete", "incomplete_expired", "paused", "canceled")


def _time(value: Any) -> datetime | None:
    return datetime.fromtimestamp(int(value), UTC) if isinstance(value, int | float) and value else None


def period_end(subscription: Document) -> datetime | None:
    """`current_period_end`, on the subscription or (newer API versions) on its first item."""
    if subscription.get("current_period_end"):
        return _time(subscription["current_period_end"])
    items = (subscription.get("items") or {}).get("data") or []
    return _time(items[0].get("current_period_end")) if items else None


class OrgBilling:
    """Checkout, portal and cancel for org plans, and the provider's subscription events."""

    def __init__(
        self,
        store: Store,
        org_access: OrgAccess,
        audit: AuditLog,
        plans: Plans,
        provider: PaymentProvider | None,
        settings: Settings,
    ) -> None:
        self.store = store
        self.org_access = org_access
        self.audit = audit
        self.plans = plans
        self.provider = provider
        self.settings = settings

    def _require_provider(self) -> PaymentProvider:
        if self.provider is None:
            raise unavailable()
        return self.provider

    def _price(self) -> dict[str, Any]:
        if self.settings.stripe_pro_price_id:
            return {"price": self.settings.stripe_pro_price_id}
        return {
            "price_data": {
                "currency": "usd",
                "unit_amount": self.settings.pro_price_cents,
                "recurring": {"interval": "month"},
                "product_data": {"name": "Pro plan"},
            }
        }

    def _billing_page(self, slug: str) -> str:
        return f"{self.settings.base_url}/orgs/{slug}/billing"

    async def checkout(self, user_id: str, slug: str) -> Document:
        """The provider's checkout URL for a Pro subscription with a trial."""
        access = await self.org_access.check(user_id, slug, "billing.checkout")
        provider = self._require_provider()  # after the role check: 503 only for those allowed
        org = access.org
        if org.get("subscriptionStatus") in ("active", "trialing", "past_due") and org.get(
            "paySubscriptionId"
        ):
            raise Conflict("The org already has a subscription; use the billing portal to change it")
        url = await provider_call(
            provider.checkout(
                org_id=org["_id"],
                customer_id=org.get("payCustomerId"),
                email=org.get("billingEmail") or access.actor.email,
                price=self._price(),
                trial_days=0 if org.get("trialUsed") else TRIAL_DAYS,
                success_url=f"{self._billing_page(slug)}?checkout=success",
                cancel_url=f"{self._billing_page(slug)}?checkout=cancelled",
            )
        )
        await self.audit.record(org["_id"], "billing.checkout_started", access.actor, {})
        return {"url": url}

    async def portal(self, user_id: str, slug: str) -> Document:
        """The provider's billing-portal URL for the org's customer."""
        access = await self.org_access.check(user_id, slug, "billing.portal")
        provider = self._require_provider()  # after the role check: 503 only for those allowed
        customer_id = access.org.get("payCustomerId")
        if not customer_id:
            raise Conflict("The org has no billing account yet; start a checkout first")
        return {"url": await provider_call(provider.portal(customer_id, self._billing_page(slug)))}

    async def cancel(self, user_id: str, slug: str) -> Document:
        """Schedule the subscription's end at the current period's end (no immediate effect)."""
        access = await self.org_access.check(user_id, slug, "billing.cancel")
        provider = self._require_provider()  # after the role check: 503 only for those allowed
        org = access.org
        subscription_id = org.get("paySubscriptionId")
        if not subscription_id or org.get("subscriptionStatus") not in ("active", "trialing", "past_due"):
            raise Conflict("The org has no active subscription to cancel")
        subscription = await provider_call(provider.cancel_at_period_end(subscription_id))
        await self._apply(org["_id"], subscription)
        end = period_end(subscription) or _time(subscription.get("trial_end"))
        await self.audit.record(
            org["_id"],
            "billing.cancel_requested",
            access.actor,
            {"subscriptionId": subscription_id, "effectiveAt": end.isoformat() if end else None},
        )
        when = end.date().isoformat() if end else "the end of the current period"
        return {
            "ok": True,
            "message": f"The Pro plan stays active until {when}, then the org returns to free.",
        }

    # ---- provider events -------------------------------------------------------------------

    async def handle_event(self, event: WebhookEvent) -> None:
        """checkout.session.completed links the customer; subscription events set the plan."""
        obj = event.data
        if event.type == "checkout.session.completed":
            org_id = obj.get("client_reference_id") or (obj.get("metadata") or {}).get("orgId")
            if not org_id or obj.get("mode") != "subscription":
                return
            org = await find_org(self.store, org_id)
            if org is None:
                return  # the org was deleted meanwhile
            if await self._duplicate(org, obj.get("subscription")):
                return
            changes = {
                key: value
                for key, value in (
                    ("payCustomerId", obj.get("customer")),
                    ("paySubscriptionId", obj.get("subscription")),
                )
                if value
            }
            # Claim the org for this subscription unless another one holds it that may pay for
            # it (two completions at once: exactly one wins, the other is cancelled). One that is
            # `incomplete` or `paused` pays for nothing and is replaced. The claim marks the
            # provider status unknown until the subscription is read, so a racing completion
            # cannot take the org meanwhile.
            claimed = await self.plans.claim_subscription(
                org_id, obj.get("subscription"), changes, REPLACEABLE
            )
            if claimed is None:
                await self._duplicate({**org, "subscriptionStatus": "active"}, obj.get("subscription"))
                return
            replaced = claimed.get("paySubscriptionId")
            ended = claimed.get("subscriptionStatus") == "cancelled" or claimed.get("payProviderStatus") in (
                "canceled",
                "incomplete_expired",
            )
            if replaced and replaced != obj.get("subscription") and not ended:
                await self._end_replaced(org_id, replaced)
            if obj.get("subscription") and self.provider is not None:
                try:
                    await self._apply(org_id, await self.provider.subscription(obj["subscription"]))
                except ProviderError:
                    log.warning("could not read the subscription of a completed checkout")
            return
        if event.type.startswith("customer.subscription."):
            org_id = await self._org_of(obj)
            org = await find_org(self.store, org_id) if org_id else None
            if org is None or org_id is None:
                log.info("subscription event for no known org", extra={"eventType": event.type})
                return
            if org.get("paySubscriptionId") and org["paySubscriptionId"] != obj.get("id"):
                # An older (replaced) subscription's late event must not change the plan.
                log.info("event of a replaced subscription ignored", extra={"eventType": event.type})
                return
            # Events arrive in any order: the provider's current state of the subscription decides.
            current = obj
            if self.provider is not None and obj.get("id"):
                try:
                    current = await self.provider.subscription(obj["id"])
                except ProviderError:
                    log.warning("could not read a subscription; applying the event's copy")
            if event.type == "customer.subscription.deleted":
                current = {**current, "status": "canceled"}
            await self._apply(org_id, current)

    async def _duplicate(self, org: Document, subscription_id: str | None) -> bool:
        """A second checkout completed while the org already pays for a live subscription (two
        checkouts opened at once): the new subscription is ended at once, never tracked."""
        current = org.get("paySubscriptionId")
        live = org.get("subscriptionStatus") in LIVE
        if not (subscription_id and current and current != subscription_id and live):
            return False
        log.warning("a duplicate subscription was cancelled", extra={"orgId": org["_id"]})
        if self.provider is not None:
            try:
                await self.provider.cancel_now(subscription_id)
            except ProviderError:
                log.error("could not cancel a duplicate subscription", extra={"orgId": org["_id"]})
        await self.audit.record(
            org["_id"], "billing.duplicate_cancelled", SYSTEM, {"subscriptionId": subscription_id}
        )
        return True

    async def _end_replaced(self, org_id: str, subscription_id: str) -> None:
        """End a subscription that paid for nothing (incomplete, paused) once a new one replaced
        it, so it can never start billing the org as well."""
        if self.provider is None:
            return
        try:
            current = await self.provider.subscription(subscription_id)
            if current.get("status") in ("canceled", "incomplete_expired"):
                return  # it ended by itself meanwhile
            await self.provider.cancel_now(subscription_id)
        except ProviderError:
            log.error("could not end a replaced subscription", extra={"orgId": org_id})
            return
        await self.audit.record(
            org_id, "billing.replaced_cancelled", SYSTEM, {"subscriptionId": subscription_id}
        )

    async def _org_of(self, subscription: Document) -> str | None:
        org_id = (subscription.get("metadata") or {}).get("orgId")
        if org_id:
            return str(org_id)
        for field, value in (
            ("paySubscriptionId", subscription.get("id")),
            ("payCustomerId", subscription.get("customer")),
        ):
            if value:
                found = await org_id_where(self.store, field, value)
                if found is not None:
                    return found
        return None

    async def _apply(self, org_id: str, subscription: Document) -> None:
        status = STATUS_MAP.get(str(subscription.get("status")))
        if isinstance(subscription.get("id"), str):
            # The provider's own status (the org's status maps several to none): whether a new
            # checkout may replace this subscription.
            await self.plans.note_provider_status(org_id, subscription["id"], str(subscription.get("status")))
        await self.plans.apply_subscription(
            org_id,
            status=status,
            trial_end=_time(subscription.get("trial_end")),
            current_period_end=period_end(subscription),
            cancel_at_period_end=bool(subscription.get("cancel_at_period_end")),
            customer_id=subscription.get("customer")
            if isinstance(subscription.get("customer"), str)
            else None,
            subscription_id=subscription.get("id"),
        )
