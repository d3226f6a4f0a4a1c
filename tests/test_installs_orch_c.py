"""orchC installs over HTTP: flattening warning, invoke proxy, self-reported runs (deduplicated, and
under the token rule), delete and 502."""

from __future__ import annotations

import pytest

from plugins.builtin import orch_c_bedrock
from tests.fakes.orch_c import FakeBedrockAgents, create_app
from tests.support.accounts import bearer, create_key, signup
from tests.support.runs import paid_template
from tests.support.templates import agent, definition, publish_template, user_with_key


@pytest.fixture
def fake():
    return FakeBedrockAgents()


@pytest.fixture
async def setup(aiohttp_server, fake, monkeypatch, make_client):
    server = await aiohttp_server(create_app(fake))
    monkeypatch.setenv(orch_c_bedrock.ENDPOINT_ENV, f"http://127.0.0.1:{server.port}")
    client = await make_client(rate_limit_multiplier=None)
    caller = await signup(client)
    key = await create_key(client, caller)
    team = definition(
        agent("boss", model="providerA:middle"),
        agent("writer", reportsTo="boss", model="providerA:small"),
        agent("editor", reportsTo="writer", model="providerB:standard"),
    )
    template = await publish_template(client, key, visibility="public", definition=team)
    body = {"templateId": template["id"], "platform": "orchC", "credentials": fake.credentials()}
    response = await client.post("/api/installs", json=body, headers=bearer(key))
    assert response.status == 201, await response.text()
    return client, bearer(key), await response.json()


async def test_install_flattens_and_warns(setup, fake, store):
    _, _, install = setup
    assert any("flattened" in warning.lower() for warning in install["warnings"])
    assert len(install["deployedAgents"]) == 3
    doc = await store.installs.find_one({"_id": install["installId"]})
    assert fake.secret_access_key not in str(doc)


async def test_invoke_proxies_and_records_counts_not_content(setup, fake, store):
    client, key, install = setup
    url = f"/api/installs/{install['installId']}/invoke"
    response = await client.post(url, json={"inputText": "Plan the week"}, headers=key)
    assert response.status == 200, await response.text()
    reply = await response.json()
    assert reply["ok"] is True and "Plan the week" in reply["text"]
    assert (reply["inputTokens"], reply["outputTokens"]) == fake.usage
    again = await client.post(
        url, json={"inputText": "And next?", "sessionId": reply["sessionId"]}, headers=key
    )
    assert (await again.json())["sessionId"] == reply["sessionId"]
    runs = await store["runs"].find({"installId": install["installId"]}).to_list(None)
    assert [r["status"] for r in runs] == ["completed", "completed"]
    assert "Plan the week" not in str(runs), "only counts and tokens are recorded"
    too_long = await client.post(url, json={"inputText": "x" * 100_001}, headers=key)
    assert too_long.status == 400


async def test_invoke_is_for_orch_c_only(make_client):
    client = await make_client(rate_limit_multiplier=None)
    caller = await signup(client)
    key = await create_key(client, caller)
    template = await publish_template(client, key, visibility="public", definition=definition(agent("lead")))
    body = {"templateId": template["id"], "platform": "svc"}
    install = await (await client.post("/api/installs", json=body, headers=bearer(key))).json()
    response = await client.post(
        f"/api/installs/{install['installId']}/invoke", json={"inputText": "hi"}, headers=bearer(key)
    )
    assert response.status == 400 and "orchC" in (await response.json())["error"]


async def test_self_reported_runs_are_deduplicated(setup, store):
    client, key, install = setup
    url = f"/api/installs/{install['installId']}/runs"
    report = {
        "agentKey": "writer",
        "status": "completed",
        "inputTokens": 10,
        "outputTokens": 4,
        "runId": "r-1",
    }
    first = await (await client.post(url, json=report, headers=key)).json()
    second = await (await client.post(url, json=report, headers=key)).json()
    assert first == second == {"ok": True, "runId": "r-1"}
    assert await store["runs"].count_documents({"installId": install["installId"]}) == 1
    unknown = await client.post(url, json={**report, "agentKey": "ghost"}, headers=key)
    assert unknown.status == 400
    bad = await client.post(url, json={"agentKey": "writer", "status": "done"}, headers=key)
    assert bad.status == 400 and "status" in (await bad.json())["error"]


async def test_self_report_follows_the_token_rule(setup, fake, store):
    # The self-report is for orchC runs made directly on Bedrock (spec): on a template priced
    # per 1K tokens it must carry both counts, as the ingest must (tests/test_runs_ingest.py).
    client = setup[0]
    _, key = await user_with_key(client)
    template = await paid_template(client, key, "per_k_tokens")
    body = {"templateId": template["id"], "platform": "orchC", "credentials": fake.credentials()}
    response = await client.post("/api/installs", json=body, headers=bearer(key))
    assert response.status == 201, await response.text()
    install_id = (await response.json())["installId"]
    url = f"/api/installs/{install_id}/runs"

    refused = await client.post(url, json={"agentKey": "lead", "status": "completed"}, headers=bearer(key))
    assert refused.status == 400 and "per_k_tokens" in (await refused.json())["error"]
    half = await client.post(
        url, json={"agentKey": "lead", "status": "completed", "inputTokens": 5}, headers=bearer(key)
    )
    assert half.status == 400 and "outputTokens" in (await half.json())["error"]
    body = {"agentKey": "lead", "status": "completed", "inputTokens": 5, "outputTokens": 6, "runId": "s-1"}
    first = await client.post(url, json=body, headers=bearer(key))
    again = await client.post(url, json=body, headers=bearer(key))
    assert first.status == again.status == 200
    assert await first.json() == await again.json() == {"ok": True, "runId": "s-1"}
    runs = await store["runs"].find({"installId": install_id}).to_list(None)  # stored once
    assert [(r["agentKey"], r["status"], r["inputTokens"], r["outputTokens"], r["source"]) for r in runs] == [
        ("lead", "completed", 5, 6, "self_report")
    ]
    negative = await client.post(url, json={**body, "inputTokens": -1}, headers=bearer(key))
    assert negative.status == 400


async def test_delete_removes_agents_aliases_and_credentials(setup, fake, store):
    client, key, install = setup
    response = await client.delete(f"/api/installs/{install['installId']}", headers=key)
    assert response.status == 200
    body = await response.json()
    assert body["deletedAgents"] == 3 and body["platform"] == "orchC"
    assert fake.agents == {} and fake.alias_count() == 0
    doc = await store.installs.find_one({"_id": install["installId"]})
    assert doc["status"] == "cancelled" and "credentialsEncrypted" not in doc


async def test_delete_without_permission_is_502_with_the_upstream_detail(setup, fake, store):
    client, key, install = setup
    fake.deny_deletes = True
    response = await client.delete(f"/api/installs/{install['installId']}", headers=key)
    assert response.status == 502
    error = (await response.json())["error"]
    assert fake.secret_access_key not in error
    assert "AccessDenied" in error or "not authorized" in error.lower()
    doc = await store.installs.find_one({"_id": install["installId"]})
    assert doc["status"] == "completed", "a failed delete leaves the install as it was"
