"""Org plans: the one place plans change (the payment provider's events and the operator's
`svc orgs set-plan`), and the billing status members read."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, Literal

from svc.core import BadRequest, Document, NotFound, Store, aware, iso, utcnow
from svc.orgs.access import NOT_FOUND, OrgAccess, is_pro
from svc.orgs.governance import Approvals
from svc.orgs.org_audit_log import SYSTEM, AuditLog
from svc.orgs.views import org_view

Plan = Literal["free", "pro"]
SUBSCRIPTION_STATUSES = ("active", "trialing", "past_due", "cancelled")
PRO_STATUSES = ("active", "trialing")


class Plans:
    """Subscription state on the org record."""

    def __init__(self, store: Store, org_access: OrgAccess, audit: AuditLog, approvals: Approvals) -> None:
        self.store = store
        self.org_access = org_access
        self.audit = audit
        self.approvals = approvals

    async def apply_subscription(
        self,
        org_id: str,
        *,
        status: str | None,
        trial_end: datetime | None,
        current_period_end: datetime | None,
        cancel_at_period_end: bool,
        customer_id: str | None,
        subscription_id: str | None,
        source: str = "payment_provider",
    ) -> dict[str, Any]:
        """Write a subscription's state; the plan is derived (pro while active or trialing).

        The one place plans change: the payment webhook and `svc orgs set-plan` call it.
        `customer_id` / `subscription_id` of None keep what is stored. Audited as
        `billing.subscription_updated`.
        """
        if status is not None and status not in SUBSCRIPTION_STATUSES:
            raise BadRequest(f"status: must be one of {', '.join(SUBSCRIPTION_STATUSES)} or null")
        plan: Plan = "pro" if status in PRO_STATUSES else "free"
        changes: Document = {
            "plan": plan,
            "subscriptionStatus": status,
            "trialEndsAt": trial_end,
            "currentPeriodEnd": current_period_end,
            "cancelAtPeriodEnd": cancel_at_period_end,
            "planUpdatedAt": utcnow(),
            "updatedAt": utcnow(),
        }
        if customer_id is not None:
            changes["payCustomerId"] = customer_id
        if subscription_id is not None:
            changes["paySubscriptionId"] = subscription_id
        before = await self.store.orgs.find_one_and_update(
            {"_id": org_id, "deleting": {"$ne": True}}, {"$set": changes}
        )
        if before is None:
            raise NotFound(NOT_FOUND)
        meta = {
            "source": source,
            "status": status,
            "plan": plan,
            "previousPlan": before.get("plan") or "free",
            "trialEndsAt": iso(trial_end),
            "currentPeriodEnd": iso(current_period_end),
            "cancelAtPeriodEnd": cancel_at_period_end,
        }
        await self.audit.record(org_id, "billing.subscription_updated", SYSTEM, meta)
        # past_due is a payment retry, not the end: approvals wait for the outcome.
        if plan == "free" and (before.get("plan") or "free") == "pro" and status != "past_due":
            await self.approvals.lapse({**before, **changes})
        return org_view({**before, **changes})

    async def claim_subscription(
        self, org_id: str, subscription_id: str | None, changes: Document, replaceable: tuple[str, ...]
    ) -> Document | None:
        """Claim the org for a completed checkout's subscription, in one conditional write, unless
        another subscription holds it that may pay for it; the org before the claim, or None.

        The claim marks the provider status unknown until the subscription is read, so a racing
        completion cannot take the org meanwhile.
        """
        return await self.store.orgs.find_one_and_update(
            {
                "_id": org_id,
                "$or": [
                    {"paySubscriptionId": {"$in": [None, subscription_id]}},
                    {"subscriptionStatus": "cancelled"},  # the previous one has ended
                    {"payProviderStatus": {"$in": list(replaceable)}},
                    # Written before the provider status was kept: never live, not a claim.
                    {"subscriptionStatus": None, "payProviderStatus": {"$exists": False}},
                ],
            },
            {"$set": {**changes, "trialUsed": True, "payProviderStatus": "claimed"}},
        )

    async def note_provider_status(self, org_id: str, subscription_id: str, status: str) -> None:
        """Keep the provider's own status of the org's subscription (whether a checkout may replace it)."""
        await self.store.orgs.update_one(
            {"_id": org_id, "paySubscriptionId": {"$in": [None, subscription_id]}},
            {"$set": {"payProviderStatus": status}},
        )

    async def set_plan(self, slug: str, plan: Plan) -> dict[str, Any]:
        """Operator override (`svc orgs set-plan`): pro as an active subscription, free as none."""
        org = await self.org_access.by_slug(slug)
        if org is None:
            raise NotFound(NOT_FOUND)
        return await self.apply_subscription(
            org["_id"],
            status="active" if plan == "pro" else None,
            trial_end=None,
            current_period_end=None,
            cancel_at_period_end=False,
            customer_id=None,
            subscription_id=None,
            source="operator",
        )

    async def billing_status(self, user_id: str, slug: str) -> dict[str, Any]:
        """The plan and subscription as stored (the payment provider is not called)."""
        org = (await self.org_access.check(user_id, slug, "billing.status")).org
        status = org.get("subscriptionStatus")
        trial_end = org.get("trialEndsAt")
        days_left = None
        if trial_end is not None:
            seconds = (aware(trial_end) - utcnow()).total_seconds()
            days_left = max(0, math.ceil(seconds / 86400))
        return {
            "plan": org.get("plan") or "free",
            "subscriptionStatus": status,
            "trialEndsAt": iso(trial_end),
            "trialDaysLeft": days_left,
            "hasCustomer": bool(org.get("payCustomerId")),
            "planUpdatedAt": iso(org.get("planUpdatedAt")),
            "isPro": is_pro(org),
            "isTrialing": status == "trialing",
        }
