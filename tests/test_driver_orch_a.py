"""orchA (Paperclip) driver: provisioning over real HTTP, rollback, uninstall, egress, installs."""

from __future__ import annotations

import socket

import pytest

from plugins.egress import EgressDenied
from plugins.manager import Plugins
from plugins.types import DeployedAgent, DeprovisionContext, PlatformError, ProvisionContext
from tests.fakes.orch_a import FakePaperclip
from tests.support.accounts import bearer, create_key, signup
from tests.support.templates import agent, definition, publish_template

TEAM = {
    "agents": [
        {
            "key": "writer",
            "name": "Writer",
            "role": "support",
            "model": "providerB:standard",
            "reportsTo": "lead",
            "prompt": "Write.",
            "adapterType": "http",
        },
        {
            "key": "lead",
            "name": "Lead",
            "role": "Manager",
            "title": "Head",
            "model": "providerA:small",
            "prompt": "Lead the team.",
        },
        {"key": "qa", "name": "QA", "role": "qa", "model": "providerC:flash", "reportsTo": "lead"},
    ]
}


@pytest.fixture
async def fake(aiohttp_server):
    paperclip = FakePaperclip()
    server = await aiohttp_server(paperclip.app())
    paperclip.base_url = str(server.make_url("")).rstrip("/")
    return paperclip


def context(fake: FakePaperclip, **options) -> ProvisionContext:
    return ProvisionContext(
        install_id="inst-1",
        platform="orchA",
        template={"id": "t1"},
        definition=TEAM,
        credentials={"orchABaseUrl": fake.base_url, "orchAApiKey": fake.api_key},
        secrets={"CRM_TOKEN": "crm-secret"},
        options=options or {"companyName": "Acme"},
        install_token="svc_install_" + "t" * 43,
        runtime_webhook_url="http://127.0.0.1:8080/api/runtime/webhook",
        webhook_secret="shared-secret",
        ingest_url="http://127.0.0.1:8080/api/runs/ingest",
        allow_private=True,
    )


async def test_platform_info():
    info = Plugins().platform("orchA")
    assert [(f.key, f.type, f.required) for f in info.credential_fields] == [
        ("orchABaseUrl", "text", True),
        ("orchAApiKey", "password", True),
    ]
    assert {"companyId", "companyName", "adapterType", "webhookUrl", "cwd", "secrets"} <= info.accepts


async def test_validation():
    plugins = Plugins()
    problems = await plugins.validate_install("orchA", {"credentials": {}}, TEAM)
    assert any("orchABaseUrl" in p for p in problems)
    assert any("companyId and companyName" in p for p in problems)
    ok = {"credentials": {"orchABaseUrl": "https://x.example", "orchAApiKey": "k"}, "companyId": "c1"}
    assert await plugins.validate_install("orchA", ok, TEAM) == []


async def test_provision_creates_company_then_managers_first(fake):
    result = await Plugins().provision("orchA", context(fake))
    assert result.company_id in fake.companies
    creates = [body for method, path, body in fake.requests if path.endswith("/agents")]
    assert [body["name"] for body in creates] == ["Lead", "Writer", "QA"], "managers are created first"
    by_key = {a.key: a.externalId for a in result.deployed_agents}
    lead, writer, qa = (fake.agents[by_key[k]] for k in ("lead", "writer", "qa"))
    assert lead["role"] == "pm" and writer["role"] == "general" and qa["role"] == "qa"
    assert writer["reportsTo"] == by_key["lead"] and lead["reportsTo"] is None
    assert writer["adapterType"] == "http"
    assert writer["adapterConfig"]["url"] == "http://127.0.0.1:8080/api/runtime/webhook"
    assert writer["adapterConfig"]["headers"] == {"X-Svc-Webhook-Secret": "shared-secret"}
    assert lead["adapterType"] == "claude_local" and qa["adapterType"] == "gemini_local"
    # The prompt goes in the top-level bundle Paperclip reads (inside adapterConfig it is ignored).
    assert lead["instructionsBundle"] == {"files": {"AGENTS.md": "Lead the team."}}
    assert "instructionsBundle" not in lead["adapterConfig"]
    assert "model" not in lead["adapterConfig"], "no Paperclip model configured: the adapter's default"
    assert lead["adapterConfig"]["dangerouslySkipPermissions"] is False
    assert lead["runtimeConfig"] == {"heartbeat": {"enabled": False, "wakeOnDemand": True}}
    env = lead["adapterConfig"]["env"]
    assert env["CRM_TOKEN"] == "crm-secret" and env["SVC_INSTALL_TOKEN"].startswith("svc_install_")
    reporting = lead["metadata"]["svcReporting"]
    assert reporting["installToken"] == env["SVC_INSTALL_TOKEN"] and reporting["agentKey"] == "lead"
    assert "metadata" not in writer, "http agents are recorded by the runtime, not the plugin"
    # Paperclip's UI routes hang off the company's issue prefix.
    assert result.platform_data["dashboardUrl"] == f"{fake.base_url}/ACM/dashboard"
    assert {"name": "Lead", "url": f"{fake.base_url}/ACM/agents/{by_key['lead']}"} in result.platform_data[
        "agentUrls"
    ]
    # The http agent has a key of its own, kept in the install's (encrypted) state for write-backs.
    assert fake.agent_keys[result.state["runtimeKeys"][by_key["writer"]]] == by_key["writer"]
    assert any("svc.paperclip-reporter" in w for w in result.warnings)
    assert any("default model" in w and "Lead" in w for w in result.warnings)


async def test_codex_agents_keep_their_sandbox_and_security_is_a_role(fake):
    team = {"agents": [{"key": "sec", "name": "Sec", "role": "Security", "model": "providerB:standard"}]}
    ctx = ProvisionContext(**{**vars(context(fake)), "definition": team})
    fake.plugins.append({"pluginKey": "svc.paperclip-reporter", "status": "ready"})
    result = await Plugins().provision("orchA", ctx)
    sec = fake.agents[result.deployed_agents[0].externalId]
    assert sec["role"] == "security" and sec["adapterType"] == "codex_local"
    assert sec["adapterConfig"]["dangerouslyBypassApprovalsAndSandbox"] is False
    assert not any("svc.paperclip-reporter" in w for w in result.warnings), "the plugin is ready"


async def test_webhook_url_and_cwd_options(fake):
    fake.companies["c9"] = {"id": "c9", "name": "Existing", "issuePrefix": "EXI"}
    result = await Plugins().provision(
        "orchA", context(fake, companyId="c9", webhookUrl="https://hooks.example.com/run", cwd="/srv/team")
    )
    by_key = {a.key: fake.agents[a.externalId] for a in result.deployed_agents}
    assert by_key["writer"]["adapterConfig"]["url"] == "https://hooks.example.com/run"
    assert by_key["lead"]["adapterConfig"]["cwd"] == "/srv/team"
    assert not any(path == "/api/companies" for _, path, _ in fake.requests), "no company created"
    assert result.platform_data["dashboardUrl"].endswith("/EXI/dashboard")
    assert result.state["runtimeKeys"] == {}, "a deployer's webhook writes back itself: no key made"


async def test_failure_half_way_rolls_back_everything(fake):
    fake.fail_agent_create_at = 3
    with pytest.raises(PlatformError) as failure:
        await Plugins().provision("orchA", context(fake))
    assert failure.value.upstream_status == 500
    assert fake.api_key not in failure.value.detail
    assert fake.agents == {} and fake.companies == {}, "created agents and the company are deleted"


async def test_wrong_key_is_a_platform_error_without_the_key(fake):
    ctx = context(fake)
    ctx = ProvisionContext(**{**vars(ctx), "credentials": {**ctx.credentials, "orchAApiKey": "wrong-key"}})
    with pytest.raises(PlatformError) as failure:
        await Plugins().provision("orchA", ctx)
    assert failure.value.upstream_status == 401 and "wrong-key" not in failure.value.detail


async def test_loopback_base_url_is_refused_without_allow_private(fake):
    ctx = ProvisionContext(**{**vars(context(fake)), "allow_private": False})
    with pytest.raises((PlatformError, EgressDenied)):
        await Plugins().provision("orchA", ctx)
    assert fake.requests == []


async def test_deprovision_deletes_every_agent(fake):
    result = await Plugins().provision("orchA", context(fake))
    removal = DeprovisionContext(
        install_id="inst-1",
        platform="orchA",
        credentials=context(fake).credentials,
        deployed_agents=(*result.deployed_agents, DeployedAgent("ghost", "ag-404", "Ghost")),
        state=result.state,
        options={},
        allow_private=True,
    )
    before = len(fake.requests)
    done = await Plugins().deprovision("orchA", removal)
    assert done.deleted_agents == 3 and fake.agents == {}
    calls = [(method, path.rsplit("/", 1)[-1]) for method, path, _ in fake.requests[before:]]
    assert calls[:4] == [("POST", "pause")] * 4, "no agent is woken while the others are deleted"
    assert calls[4:8] == [("DELETE", a.externalId) for a in removal.deployed_agents]
    assert fake.companies == {}, "the company the install created is deleted with its agents"
    fake.deny_deletes = True
    with pytest.raises(PlatformError) as failure:
        await Plugins().deprovision("orchA", removal)
    assert failure.value.denied


async def test_install_over_http_with_company_name_and_top_level_credentials(make_client, fake, store):
    client = await make_client(rate_limit_multiplier=None)
    caller = await signup(client)
    key = await create_key(client, caller)
    team = definition(agent("lead"), agent("writer", reportsTo="lead"))
    template = await publish_template(client, key, visibility="public", definition=team)
    body = {
        "templateId": template["id"],
        "companyName": "Acme",
        "orchABaseUrl": fake.base_url,
        "orchAApiKey": fake.api_key,
        "secrets": {"CRM_TOKEN": "s3cret"},
    }
    response = await client.post("/api/installs", json=body, headers=bearer(key))
    assert response.status == 201, await response.text()
    created = await response.json()
    assert created["platform"] == "orchA" and created["companyId"] in fake.companies
    assert len(created["deployedAgents"]) == 2
    assert any("svc.paperclip-reporter" in w for w in created["warnings"]), "the plugin is not installed"
    doc = await store.installs.find_one({"_id": created["installId"]})
    assert fake.api_key not in str(doc) and "s3cret" not in str(doc), "credentials and secrets are encrypted"
    listed = await (await client.get("/api/installs", headers=bearer(key))).json()
    assert listed["installs"][0]["orchABaseUrl"] == fake.base_url
    # Spec: a non-orchC install is cancelled without touching the platform...
    response = await client.delete(f"/api/installs/{created['installId']}", headers=bearer(key))
    assert (await response.json())["deletedAgents"] == 0 and len(fake.agents) == 2
    # ...and its agents can still be removed afterwards, with the company it created, once.
    url = f"/api/installs/{created['installId']}?removeUpstream=true"
    response = await client.delete(url, headers=bearer(key))
    assert response.status == 200, await response.text()
    assert (await response.json())["deletedAgents"] == 2 and fake.agents == {} and fake.companies == {}
    response = await client.delete(url, headers=bearer(key))
    assert response.status == 409 and await response.json() == {"error": "Install is already cancelled"}


async def test_remove_upstream_on_delete(make_client, fake):
    client = await make_client(rate_limit_multiplier=None)
    caller = await signup(client)
    key = await create_key(client, caller)
    template = await publish_template(client, key, visibility="public", definition=definition(agent("lead")))
    fake.companies["c1"] = {"id": "c1", "name": "Acme"}
    body = {
        "templateId": template["id"],
        "platform": "orchA",
        "companyId": "c1",
        "credentials": {"orchABaseUrl": fake.base_url, "orchAApiKey": fake.api_key},
    }
    created = await (await client.post("/api/installs", json=body, headers=bearer(key))).json()
    response = await client.delete(
        f"/api/installs/{created['installId']}?removeUpstream=true", headers=bearer(key)
    )
    assert (await response.json())["deletedAgents"] == 1 and fake.agents == {}


async def test_upstream_failure_over_http_is_502_and_stores_nothing(make_client, fake, store):
    client = await make_client(rate_limit_multiplier=None)
    caller = await signup(client)
    key = await create_key(client, caller)
    template = await publish_template(client, key, visibility="public", definition=definition(agent("lead")))
    fake.fail_agent_create_at = 1
    body = {
        "templateId": template["id"],
        "companyName": "Acme",
        "credentials": {"orchABaseUrl": fake.base_url, "orchAApiKey": fake.api_key},
    }
    response = await client.post("/api/installs", json=body, headers=bearer(key))
    assert response.status == 502
    error = await response.json()
    assert "500" in error["error"] and fake.api_key not in error["error"]
    assert error["upstreamStatus"] == 500
    assert await store.installs.count_documents({}) == 0
    assert await store.install_tokens.count_documents({}) == 0
    assert fake.companies == {}


async def test_vault_prefills_a_reinstall_into_the_same_company_only(make_client, fake):
    client = await make_client(rate_limit_multiplier=None)
    caller = await signup(client)
    key = await create_key(client, caller)
    team = definition(agent("lead"), requiredSecrets=["CRM_TOKEN"])
    template = await publish_template(client, key, visibility="public", definition=team)
    fake.companies["c1"] = {"id": "c1", "name": "Acme"}
    credentials = {"orchABaseUrl": fake.base_url, "orchAApiKey": fake.api_key}

    async def install(**fields):
        body = {"templateId": template["id"], "credentials": credentials, **fields}
        response = await client.post("/api/installs", json=body, headers=bearer(key))
        assert response.status == 201, await response.text()
        agent_id = (await response.json())["deployedAgents"][0]["externalId"]
        return fake.agents[agent_id]["adapterConfig"]["env"]

    assert (await install(companyId="c1", secrets={"CRM_TOKEN": "from-first"}))["CRM_TOKEN"] == "from-first"
    assert (await install(companyId="c1"))["CRM_TOKEN"] == "from-first", "re-install is pre-filled"
    assert "CRM_TOKEN" not in await install(companyName="Fresh Co"), "a new company starts empty"
    known = await client.get("/api/secrets/known?companyId=c1&keys=CRM_TOKEN,OTHER", headers=bearer(key))
    assert (await known.json()) == {"known": ["CRM_TOKEN"]}
    other = await create_key(client, await signup(client))
    known = await client.get("/api/secrets/known?companyId=c1&keys=CRM_TOKEN", headers=bearer(other))
    assert (await known.json()) == {"known": []}, "another owner sees nothing of this vault"


async def test_a_non_json_answer_rolls_back_and_is_a_platform_error(fake):
    fake.html_at = 2
    with pytest.raises(PlatformError) as failure:
        await Plugins().provision("orchA", context(fake))
    assert "without JSON" in failure.value.detail
    assert fake.agents == {} and fake.companies == {}


async def test_rotating_the_board_key_with_a_patch_of_the_credentials(make_client, fake):
    client = await make_client(rate_limit_multiplier=None)
    caller = await signup(client)
    key = await create_key(client, caller)
    template = await publish_template(client, key, visibility="public", definition=definition(agent("lead")))
    fake.companies["c1"] = {"id": "c1", "name": "Acme", "issuePrefix": "ACM"}
    body = {
        "templateId": template["id"],
        "companyId": "c1",
        "credentials": {"orchABaseUrl": fake.base_url, "orchAApiKey": fake.api_key},
    }
    created = await (await client.post("/api/installs", json=body, headers=bearer(key))).json()
    assert any("expires at 2026-12-23T21:19:50.102Z" in w for w in created["warnings"]), created
    install_id = created["installId"]
    url = f"/api/installs/{install_id}/credentials"
    for bad, message in (
        ({"orchAToken": "x"}, "credentials.orchAToken: not a credential of platform orchA"),
        ({"orchAApiKey": 5}, "credentials.orchAApiKey: must be a string"),
        ({"orchABaseUrl": "ftp://x"}, "credentials.orchABaseUrl must be an http(s) URL"),
        ({}, "No credentials given"),
    ):
        response = await client.patch(url, json=bad, headers=bearer(key))
        assert response.status == 400 and await response.json() == {"error": message}
    stranger = await create_key(client, await signup(client))
    assert (await client.patch(url, json={"orchAApiKey": "k"}, headers=bearer(stranger))).status == 404
    fake.api_key = "rotated-board-key"  # the old key stops working upstream
    rotated = {"credentials": {"orchAApiKey": "rotated-board-key"}}
    response = await client.patch(url, json=rotated, headers=bearer(key))
    assert await response.json() == {"ok": True, "installId": install_id, "updatedKeys": ["orchAApiKey"]}
    assert "rotated-board-key" not in await response.text()
    removed = await client.delete(f"/api/installs/{install_id}?removeUpstream=true", headers=bearer(key))
    assert (await removed.json())["deletedAgents"] == 1 and fake.agents == {}, "the new key is the one used"


async def test_paperclip_down_or_a_refused_key_is_a_502_that_says_what_to_do(make_client, fake, store):
    client = await make_client(rate_limit_multiplier=None)
    key = await create_key(client, await signup(client))
    template = await publish_template(client, key, visibility="public", definition=definition(agent("lead")))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"  # nothing listens once the socket closes
    body = {"templateId": template["id"], "companyName": "Acme"}
    down = await client.post(
        "/api/installs", json={**body, "credentials": {"orchABaseUrl": closed, "orchAApiKey": "k"}},
        headers=bearer(key),
    )
    assert down.status == 502 and "is Paperclip running" in (await down.json())["error"]
    refused = await client.post(
        "/api/installs",
        json={**body, "credentials": {"orchABaseUrl": fake.base_url, "orchAApiKey": "pcp_board_revoked1"}},
        headers=bearer(key),
    )
    error = await refused.json()
    assert refused.status == 502 and error["upstreamStatus"] == 401
    assert "Agent token did not verify" in error["error"], "Paperclip's own words"
    assert "PATCH /api/installs/:id/credentials" in error["error"], "and what to do"
    assert "pcp_board_revoked1" not in error["error"]
    assert await store.installs.count_documents({}) == 0 and fake.companies == {}
