"""orchA (Paperclip) driver: provisioning over real HTTP, rollback, uninstall, egress, installs."""

from __future__ import annotations

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
    bundle = lead["adapterConfig"]["instructionsBundle"]["files"][0]
    assert bundle == {"path": "AGENTS.md", "content": "Lead the team."}
    env = lead["adapterConfig"]["env"]
    assert env["CRM_TOKEN"] == "crm-secret" and env["SVC_INSTALL_TOKEN"].startswith("svc_install_")
    assert result.platform_data["dashboardUrl"].endswith(f"/companies/{result.company_id}")


async def test_webhook_url_and_cwd_options(fake):
    fake.companies["c9"] = {"id": "c9", "name": "Existing"}
    result = await Plugins().provision(
        "orchA", context(fake, companyId="c9", webhookUrl="https://hooks.example.com/run", cwd="/srv/team")
    )
    by_key = {a.key: fake.agents[a.externalId] for a in result.deployed_agents}
    assert by_key["writer"]["adapterConfig"]["url"] == "https://hooks.example.com/run"
    assert by_key["lead"]["adapterConfig"]["cwd"] == "/srv/team"
    assert not any(path == "/api/companies" for _, path, _ in fake.requests), "no company created"


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
    done = await Plugins().deprovision("orchA", removal)
    assert done.deleted_agents == 3 and fake.agents == {}
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
    assert len(created["deployedAgents"]) == 2 and "warnings" not in created
    doc = await store.installs.find_one({"_id": created["installId"]})
    assert fake.api_key not in str(doc) and "s3cret" not in str(doc), "credentials and secrets are encrypted"
    listed = await (await client.get("/api/installs", headers=bearer(key))).json()
    assert listed["installs"][0]["orchABaseUrl"] == fake.base_url
    # Spec: a non-orchC install is cancelled without touching the platform...
    response = await client.delete(f"/api/installs/{created['installId']}", headers=bearer(key))
    assert (await response.json())["deletedAgents"] == 0 and len(fake.agents) == 2


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
