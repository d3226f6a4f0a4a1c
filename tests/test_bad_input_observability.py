"""Client mistakes on the observability, billing and org routes are 400s, never 500s."""

from __future__ import annotations

from typing import Any

from tests.support.accounts import bearer
from tests.support.billing import paid_install, payment_settings
from tests.support.orgs import make_pro, send, world


async def test_huge_token_counts_are_refused(make_client: Any) -> None:
    client = await make_client(**payment_settings(None))
    deal = await paid_install(client, None)
    for tokens in (10**20, 10**12 + 1, -1, 1.5, "7"):
        body = {"agentKey": "lead", "status": "completed", "inputTokens": tokens, "outputTokens": 1}
        response = await client.post(
            f"/api/installs/{deal.install_id}/runs", json=body, headers=bearer(deal.deployer_key)
        )
        assert response.status == 400, (tokens, await response.text())


async def test_out_of_range_dates_are_refused(make_client: Any) -> None:
    client = await make_client(rate_limit_multiplier=None)
    w = await world(client)
    await make_pro(client, w.org["id"])
    bad = ("0001-01-02T00:00:00Z", "0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", "yesterday")
    for value in bad:
        for path in ("analytics", "audit-log"):
            for name in ("from", "to"):
                response = await send(client, w.owner, "GET", f"{w.base}/{path}", params={name: value})
                assert response.status == 400, (path, name, value, await response.text())


async def test_a_cancelled_install_takes_no_reports(make_client: Any) -> None:
    client = await make_client(**payment_settings(None))
    deal = await paid_install(client, None)
    await client.delete(f"/api/installs/{deal.install_id}", headers=bearer(deal.deployer_key))
    response = await client.post(
        f"/api/installs/{deal.install_id}/runs",
        json={"agentKey": "lead", "status": "completed"},
        headers=bearer(deal.deployer_key),
    )
    assert response.status == 409
    assert (await response.json())["error"] == "Install is not ready (status: cancelled)"
