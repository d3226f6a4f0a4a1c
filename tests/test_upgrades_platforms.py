"""Moves on external platforms, over HTTP against local fakes: orchA (Paperclip) and orchB update,
create and remove agents in place and undo a half-made change; orchC says in its plan that it
cannot and is refused before anything changes (docs/upgrades.md)."""

from __future__ import annotations

from typing import Any

from plugins.builtin import orch_c_bedrock
from tests.fakes.orch_a import FakePaperclip
from tests.fakes.orch_c import FakeBedrockAgents
from tests.fakes.orch_c import create_app as orch_c_app
from tests.support.accounts import app_store, bearer, create_key, signup
from tests.support.installs import install_ok, orch_b_credentials, start_fake_orch_b
from tests.support.runs import start_paperclip
from tests.support.templates import agent, definition, publish_template
from tests.support.upgrades import LOCKED, move, move_ok, plan_of, publish_next, versions

V1 = definition(
    agent("lead", name="Lead", role="manager", prompt="Lead v1."),
    agent("writer", name="Writer", prompt="Write v1.", reportsTo="lead", adapterType="http"),
    agent("old", name="Old", prompt="Old v1.", reportsTo="lead"),
)
# lead and writer change, old goes, editor comes (http, reporting to lead; it reaches nothing, so
# there is no widened reach to accept).
V2 = definition(
    agent("lead", name="Lead", role="manager", prompt="Lead v2."),
    agent("writer", name="Writer", prompt="Write v2.", reportsTo="lead", adapterType="http"),
    agent(
        "editor", name="Editor", prompt="Edit v2.", reportsTo="lead", adapterType="http", accessPolicy=LOCKED
    ),
)


async def deployer(client: Any) -> tuple[str, dict[str, Any]]:
    caller = await signup(client)
    key = await create_key(client, caller)
    return key, await publish_template(client, key, definition=V1)


async def orch_a_install(client: Any, aiohttp_server: Any) -> tuple[FakePaperclip, str, str, dict[str, str]]:
    """An orchA install of V1 on the fake Paperclip, and V2 published: (fake, key, install, agent ids)."""
    fake = await start_paperclip(aiohttp_server)
    key, template = await deployer(client)
    credentials = {"orchABaseUrl": fake.base_url, "orchAApiKey": fake.api_key}
    made = await install_ok(
        client, key, templateId=template["id"], platform="orchA", credentials=credentials, companyName="Acme"
    )
    await publish_next(client, key, template["id"], V2, "an editor instead of old")
    return fake, key, made["installId"], {a["key"]: a["externalId"] for a in made["deployedAgents"]}


async def test_orch_a_updates_creates_and_removes_agents_in_place(client, aiohttp_server):
    fake, key, install_id, ids = await orch_a_install(client, aiohttp_server)

    plan = await plan_of(client, bearer(key), install_id)
    assert plan["platform"]["inPlace"] is True and plan["ready"] is True, plan["problems"]
    actions = {c["key"]: c["action"] for c in plan["platform"]["changes"]}
    assert actions == {"lead": "update", "writer": "update", "editor": "create", "old": "remove"}
    assert not [r for r in fake.requests if r[0] in ("PATCH", "PUT")], "a dry run changes nothing upstream"

    moved = await move_ok(client, bearer(key), install_id)
    assert moved["status"] == "upgraded" and moved["warnings"] == []
    now = {a["key"]: a["externalId"] for a in moved["deployedAgents"]}
    assert (now["lead"], now["writer"]) == (ids["lead"], ids["writer"]), "kept agents keep their ids"
    assert ids["old"] not in fake.agents and now["editor"] in fake.agents
    lead = fake.agents[ids["lead"]]
    assert lead["instructionsBundle"]["files"]["AGENTS.md"] == "Lead v2."
    assert lead["adapterConfig"]["env"]["SVC_INSTALL_TOKEN"].startswith("svc_install_")
    assert fake.agents[now["editor"]]["reportsTo"] == ids["lead"]
    assert any(token_agent == now["editor"] for token_agent in fake.agent_keys.values()), "http: its key"
    patches = [r for r in fake.requests if r[0] == "PATCH" and r[1].startswith("/api/agents/")]
    assert all(body["replaceAdapterConfig"] is True for _, _, body in patches)
    stored = await app_store(client).installs.find_one({"_id": install_id})
    assert [a["key"] for a in stored["deployedAgents"]] == ["lead", "writer", "editor"]
    assert (await versions(client, bearer(key), install_id))["currentVersion"] == 2


async def test_orch_a_undoes_a_half_made_change_and_names_the_platforms_answer(client, aiohttp_server):
    fake, key, install_id, ids = await orch_a_install(client, aiohttp_server)
    before = {agent_id: dict(agent) for agent_id, agent in fake.agents.items()}
    fake.fail_agent_create_at = fake._agent_creates + 1  # lead and writer are updated, then the create fails

    refused = await move(client, bearer(key), install_id)
    assert refused.status == 502
    body = await refused.json()
    assert body["error"].startswith("orchA refused the change: orchA POST /api/companies/")
    assert "answered HTTP 500" in body["error"] and body["error"].endswith("the install stays on version 1")
    assert body["upstreamStatus"] == 500
    assert set(fake.agents) == set(before), "nothing created stays, nothing removed"
    assert fake.agents[ids["lead"]]["instructionsBundle"]["files"]["AGENTS.md"] == "Lead v1."
    stored = await app_store(client).installs.find_one({"_id": install_id})
    assert stored["templateVersion"] == 1 and "upgrading" not in stored
    assert (await versions(client, bearer(key), install_id))["currentVersion"] == 1

    fake.fail_agent_create_at = None
    assert (await move_ok(client, bearer(key), install_id))["status"] == "upgraded", (
        "and it can be tried again"
    )


async def test_orch_b_upserts_agents_in_place_and_undoes_a_failure(client, aiohttp_server, monkeypatch):
    fake = await start_fake_orch_b(aiohttp_server, monkeypatch)
    key, template = await deployer(client)
    made = await install_ok(
        client, key, templateId=template["id"], platform="orchB", credentials=orch_b_credentials(fake)
    )
    install_id = made["installId"]
    ids = {a["key"]: a["externalId"] for a in made["deployedAgents"]}
    await publish_next(client, key, template["id"], V2, "an editor instead of old")
    secrets = await move(client, bearer(key), install_id, secrets={"X": "y"})
    assert secrets.status == 400 and await secrets.json() == {
        "error": "secrets are not accepted for this install's platform"
    }

    fake.fail_upsert_at = fake.upserts + 3  # lead and writer are updated, then the editor's create fails
    refused = await move(client, bearer(key), install_id)
    assert refused.status == 502 and (await refused.json())["upstreamStatus"] == 500
    assert fake.agents[ids["lead"]]["system_prompt"] == "Lead v1.", "the updated agents were put back"
    assert set(fake.agents) == set(ids.values())

    fake.fail_upsert_at = None
    moved = await move_ok(client, bearer(key), install_id)
    now = {a["key"]: a["externalId"] for a in moved["deployedAgents"]}
    assert now["lead"] == ids["lead"] and fake.agents[ids["lead"]]["system_prompt"] == "Lead v2."
    assert ids["old"] not in fake.agents and now["editor"] in fake.agents


async def test_orch_c_cannot_move_in_place_and_is_refused_before_anything_changes(
    client, aiohttp_server, monkeypatch
):
    fake = FakeBedrockAgents()
    server = await aiohttp_server(orch_c_app(fake))
    monkeypatch.setenv(orch_c_bedrock.ENDPOINT_ENV, f"http://127.0.0.1:{server.port}")
    key, template = await deployer(client)
    made = await install_ok(
        client, key, templateId=template["id"], platform="orchC", credentials=fake.credentials()
    )
    install_id = made["installId"]
    await publish_next(client, key, template["id"], V2, "an editor instead of old")
    writes = len(fake.writes())
    plan = await plan_of(client, bearer(key), install_id)
    assert plan["platform"]["inPlace"] is False and plan["ready"] is False
    assert plan["platform"]["reason"] == "platform orchC does not support upgrading an install in place"
    refused = await move(client, bearer(key), install_id)
    assert refused.status == 409
    assert await refused.json() == {
        "error": "platform orchC does not support upgrading an install in place; "
        "the install stays on version 1"
    }
    assert len(fake.writes()) == writes, "nothing was changed upstream"
    assert (await versions(client, bearer(key), install_id))["currentVersion"] == 1
