"""Responses of usage billing, charges, payouts and the payment provider's webhook."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from api.schemas.common import Reply, Timestamp


class Pricing(BaseModel):
    """The template's price as billed."""

    model: Literal["free", "per_run", "per_k_tokens"]
    priceUsdCents: int | None
    envelopeFeePercent: int
    priceDisplay: str


class Period(BaseModel):
    """The billed window."""

    days: int
    start: Timestamp
    end: Timestamp


class Usage(BaseModel):
    """What was used in the window (failed runs count in totalRuns only)."""

    totalRuns: int
    completedRuns: int
    totalTokens: int
    billedTokens: int


class Amounts(BaseModel):
    """What the window costs, and the builder's and the platform's shares."""

    totalAmountCents: int
    builderAmountCents: int
    envelopeFeeCents: int
    projectedMonthlyAmountCents: int
    totalAmountDisplay: str
    projectedMonthlyDisplay: str


class InstallUsage(BaseModel):
    """One install's part of the window."""

    installId: str
    runs: int
    tokens: int
    amountCents: int


class BillingReport(Reply):
    """GET /api/billing."""

    templateId: str
    templateSlug: str
    pricing: Pricing
    period: Period
    usage: Usage
    billing: Amounts
    byInstall: list[InstallUsage]


class SetupIntentReply(Reply):
    """POST /api/stripe/setup-intent."""

    clientSecret: str
    customerId: str


class ConnectStatus(Reply):
    """GET /api/stripe/connect/status: `dashboardUrl` once the payout account is active."""

    status: str = Field(description="not_connected, pending_onboarding, active or restricted")
    dashboardUrl: str | None = None


class ChargeReply(Reply):
    """POST /api/stripe/charge-cycle: `succeeded`, or `already_paid` for a period billed before."""

    status: Literal["succeeded", "already_paid"]
    invoiceId: str
    paymentIntentId: str | None = None
    amountCents: int | None = None


class CancelBillingReply(Reply):
    """PATCH /api/stripe/installs/:installId/cancel."""

    status: Literal["cancelled"]
    charged: bool
    amountCents: int


class TemplateEarnings(BaseModel):
    """A template's paid invoices, the builder's share."""

    templateId: str
    name: str | None
    slug: str | None
    paidCount: int
    builderAmountCents: int
    lastPaidAt: Timestamp | None = Field(description="period start of the newest paid invoice")


class Earnings(Reply):
    """GET /api/stripe/my-earnings."""

    totalBuilderAmountCents: int
    byTemplate: list[TemplateEarnings]


class WebhookReceipt(Reply):
    """POST /api/stripe/webhook: the event was verified (and applied once)."""

    received: bool
