"""Client mistakes on the observability, billing and org routes are 400s, never 500s."""

from __future__ import annotations

from typing import Any

from tests.support.accounts import app_store, bearer
from tests.support.billing import paid_install, payment_settings
from tests.support.installs import start_fake_orch_c
from tests.support.orgs import make_pro, send, world
from tests.support.runs import ingest, ingest_body, start_paperclip


async def test_huge_token_counts_are_refused(make_client: Any, aiohttp_server: Any, monkeypatch: Any) -> None:
    # On installs that take reports: an orchC deployer's self-report, an orchA agent's ingest.
    bedrock = await start_fake_orch_c(aiohttp_server, monkeypatch)
    paperclip = await start_paperclip(aiohttp_server)
    client = await make_client(**payment_settings(None))
    direct = await paid_install(client, None, platform="orchC", upstream=bedrock)
    pushed = await paid_install(client, None, platform="orchA", upstream=paperclip)
    assert pushed.install_token is not None
    for tokens in (10**20, 10**12 + 1, -1, 1.5, "7"):
        body = {"agentKey": "lead", "status": "completed", "inputTokens": tokens, "outputTokens": 1}
        response = await client.post(
            f"/api/installs/{direct.install_id}/runs", json=body, headers=bearer(direct.deployer_key)
        )
        assert response.status == 400, (tokens, await response.text())
        report = ingest_body(pushed.agents["lead"], inputTokens=tokens)
        response = await ingest(client, pushed.install_token, report)
        assert response.status == 400, (tokens, await response.text())
    assert await app_store(client)["runs"].count_documents({}) == 0


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


async def test_a_cancelled_install_takes_no_reports(
    make_client: Any, aiohttp_server: Any, monkeypatch: Any
) -> None:
    # An orchC install: the platform whose deployers self-report the runs they make directly.
    bedrock = await start_fake_orch_c(aiohttp_server, monkeypatch)
    client = await make_client(**payment_settings(None))
    deal = await paid_install(client, None, platform="orchC", upstream=bedrock)
    deleted = await client.delete(f"/api/installs/{deal.install_id}", headers=bearer(deal.deployer_key))
    assert deleted.status == 200, await deleted.text()
    response = await client.post(
        f"/api/installs/{deal.install_id}/runs",
        json={"agentKey": "lead", "status": "completed"},
        headers=bearer(deal.deployer_key),
    )
    assert response.status == 409
    assert (await response.json())["error"] == "Install is not ready (status: cancelled)"
