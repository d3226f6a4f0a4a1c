"""The money paths against the provider's published API description: the three defects the
description found, the outcome of every provider error class, and the event sequences of
Connect, transfers and Checkout (which no independent emulator here implements)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import stripe

from tests.billing_helpers import (
    CARD,
    charge_cycle,
    paid_install,
    payment_settings,
    post_event,
    start_fake_stripe,
)
from tests.conftest import app_store
from tests.fakes.stripe import API_VERSION

SEPTEMBER = {"periodStart": "2026-09-01T00:00:00Z", "periodEnd": "2026-10-01T00:00:00Z"}


def test_the_vendored_description_is_the_sdks_api_version() -> None:
    from tests.fakes.stripe_contract import spec

    assert spec()["info"]["version"] == stripe.api_version == API_VERSION


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
