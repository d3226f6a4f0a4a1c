"""Driver failures: the caller's input a 400, the upstream a 502; never a 500 or a resolution oracle."""

from __future__ import annotations

import pytest

from tests.support.installs import install, orch_b_credentials, published_team, start_fake_orch_b
from tests.support.templates import user_with_key

pytestmark = pytest.mark.usefixtures("store")


@pytest.mark.parametrize(
    "base_url",
    [
        "http://10.1.2.3:3100",
        "http://127.0.0.1:9",
        "http://[::ffff:0:7f00:1]/",
        "http://no-such-host.invalid",
    ],
)
async def test_a_refused_orch_a_base_url_is_a_400_without_resolution_detail(make_client, base_url):
    client = await make_client(egress_allow_private=False, rate_limit_multiplier=None)
    _user, key = await user_with_key(client)
    template = await published_team(client, key)
    credentials = {"orchABaseUrl": base_url, "orchAApiKey": "board-key"}
    response = await install(
        client, key, templateId=template["id"], platform="orchA", credentials=credentials, companyId="c1"
    )
    assert response.status == 400, await response.text()
    error = (await response.json())["error"]
    assert "base URL not allowed" in error and "SVC_EGRESS_ALLOW_PRIVATE" in error
    for oracle in ("resolve", "loopback", "private address", "reserved", "10.1.2.3", "127.0.0.1"):
        assert oracle not in error


@pytest.mark.parametrize("base_url", ["http://127.0.0.1:9/latest", "http://no-such-host.invalid/latest"])
async def test_a_refused_orch_b_upstream_is_a_502_not_a_500(
    make_client, aiohttp_server, monkeypatch, base_url
):
    fake = await start_fake_orch_b(aiohttp_server, monkeypatch)
    monkeypatch.setenv("SVC_ORCHB_BASE_URL", base_url)
    client = await make_client(egress_allow_private=False, rate_limit_multiplier=None)
    _user, key = await user_with_key(client)
    template = await published_team(client, key)
    response = await install(
        client, key, templateId=template["id"], platform="orchB", credentials=orch_b_credentials(fake)
    )
    assert response.status == 502, await response.text()
    assert (await response.json())[
        "error"
    ] == "orchB agents/upsert failed: the configured base URL is not allowed"
