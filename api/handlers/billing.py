"""Usage billing and payments: the billing view, charges, cancel billing, payouts, webhooks."""

from __future__ import annotations

from aiohttp import web

from api.context import principal, services, user_id
from api.routing import RouteTable
from api.schemas import (
    BillingReport,
    CancelBillingReply,
    ChargeReply,
    ConnectStatus,
    Earnings,
    SetupIntentReply,
    UrlReply,
    WebhookReceipt,
)
from svc.billing import BillingQuery, ChargeCycleBody, OnboardBody, SetupIntentBody

routes = RouteTable()
MAX_WEBHOOK_BYTES = 512 * 1024


@routes.get("/api/billing", auth="K", query=BillingQuery, response=BillingReport)
async def billing(request: web.Request, query: BillingQuery) -> web.Response:
    """A template's usage and charges over a period (its builder sees every install)."""
    return web.json_response(await services(request).usage.report(principal(request), query))


@routes.post("/api/stripe/setup-intent", auth="AK", body=SetupIntentBody, response=SetupIntentReply)
async def setup_intent(request: web.Request, body: SetupIntentBody) -> web.Response:
    """A customer and a setup intent for saving a deployer's payment method."""
    return web.json_response(await services(request).payouts.setup_intent(body))


@routes.post("/api/stripe/connect/onboard", auth="S", body=OnboardBody, response=UrlReply)
async def connect_onboard(request: web.Request, body: OnboardBody) -> web.Response:
    """A one-time payout-account onboarding URL for the signed-in builder."""
    return web.json_response(await services(request).payouts.onboard(user_id(request), body))


@routes.get("/api/stripe/connect/status", auth="S", response=ConnectStatus)
async def connect_status(request: web.Request) -> web.Response:
    """The builder's payout account status (with a dashboard link once active)."""
    return web.json_response(await services(request).payouts.status(user_id(request)))


@routes.post("/api/stripe/charge-cycle", auth="AK", body=ChargeCycleBody, response=ChargeReply)
async def charge_cycle(request: web.Request, body: ChargeCycleBody) -> web.Response:
    """Charge an install for a period, once (a repeat answers `already_paid`)."""
    return web.json_response(await services(request).charges.charge_cycle(principal(request), body))


@routes.patch("/api/stripe/installs/{installId}/cancel", auth="S", response=CancelBillingReply)
async def cancel_install(request: web.Request) -> web.Response:
    """Bill usage since the last paid period, send a receipt, cancel the install."""
    result = await services(request).charges.cancel_install(user_id(request), request.match_info["installId"])
    return web.json_response(result)


@routes.get("/api/stripe/my-earnings", auth="S", response=Earnings)
async def my_earnings(request: web.Request) -> web.Response:
    """The builder's share of paid invoices, by template."""
    return web.json_response(await services(request).charges.earnings(user_id(request)))


@routes.post("/api/stripe/webhook", auth="P", response=WebhookReceipt)
async def webhook(request: web.Request) -> web.Response:
    """Payment-provider events, applied once each after the signature is checked."""
    if request.content_length is not None and request.content_length > MAX_WEBHOOK_BYTES:
        raise web.HTTPRequestEntityTooLarge(max_size=MAX_WEBHOOK_BYTES, actual_size=request.content_length)
    payload = await request.read()
    result = await services(request).payouts.webhook(payload, request.headers.get("Stripe-Signature"))
    return web.json_response(result)
