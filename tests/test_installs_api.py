"""Installs over HTTP (spec "Install", "Installs", Install state table, "Authentication" 5 to 9,
Errors 400/404/409/502): `svc` installs end to end, `orchB` installs against its fake upstream,
ownership and key scoping, deletion, the secret vault look-up and the platform list.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from svc.core import credential_digest
from tests.fakes.orch_b import FakeOrchB
from tests.support.accounts import bearer, create_key
from tests.support.installs import (
    SECRETS,
    VARIABLES,
    install,
    install_ok,
    list_installs,
    managed_install,
    mine,
    nothing_written,
    orch_b_credentials,
    published_team,
    start_fake_orch_b,
    summary,
    team_definition,
)
from tests.support.orgs import create_org, join, make_pro, ok, org_key, send
from tests.support.templates import create_template, release, user_with_key

LIST_FIELDS = {
    "id",
    "templateId",
    "templateName",
    "templateSlug",
    "templateVersion",
    "platform",
    "companyId",
    "orchABaseUrl",
    "status",
    "createdAt",
}
SUMMARY_FIELDS = {
    "id",
    "name",
    "pipelineName",
    "orgSlug",
    "status",
    "platform",
    "lastRunAt",
    "nextRunAt",
    "webhookToken",
    "requiredVariables",
    "currentVariables",
    "missingSecrets",
    "missingVariables",
    # Beyond the spec's list (issue 34): the version and whether a newer one is available.
    "templateVersion",
    "updateAvailable",
}
CREATED_FIELDS = {"installId", "platform", "deployedAgents", "platformData"}
TEAM = [("lead", "Lead"), ("writer", "Writer")]


@pytest.fixture
async def fake(aiohttp_server, monkeypatch) -> FakeOrchB:
    return await start_fake_orch_b(aiohttp_server, monkeypatch)


async def patch_install(client: Any, key: str, install_id: str, what: str, body: Any) -> Any:
    """PATCH /api/installs/:id/{variables,secrets}; returns the response."""
    return await client.patch(f"/api/installs/{install_id}/{what}", json=body, headers=bearer(key))


async def patch_ok(client: Any, key: str, install_id: str, what: str, body: Any) -> dict[str, Any]:
    response = await patch_install(client, key, install_id, what, body)
    assert response.status == 200, await response.text()
    return dict(await response.json())


async def delete_install(client: Any, key: str, install_id: str) -> Any:
    return await client.delete(f"/api/installs/{install_id}", headers=bearer(key))


async def whoami(client: Any, key: str) -> Any:
    return await client.get("/api/installs/whoami", headers=bearer(key))


# ---- svc installs -------------------------------------------------------------------------------


async def test_svc_install_is_created_linked_and_listed_with_its_pinned_version(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    owner, key = await user_with_key(client)
    template = await published_team(client, key, name="Support Team")

    created = await install_ok(
        client, key, templateId=template["id"], platform="svc", variables={"company": "Acme"}
    )

    assert set(created) == CREATED_FIELDS  # no `warnings` key when there are none
    install_id = created["installId"]
    assert created["platform"] == "svc"
    assert [(a["key"], a["name"]) for a in created["deployedAgents"]] == TEAM
    assert all(set(a) == {"key", "externalId", "name"} for a in created["deployedAgents"])
    external_ids = [a["externalId"] for a in created["deployedAgents"]]
    assert all(isinstance(e, str) and e for e in external_ids) and len(set(external_ids)) == 2
    assert {"dashboardUrl", "agentUrls"} <= set(created["platformData"])

    # The creating key is linked to the new install; another (unscoped) key is not.
    response = await whoami(client, key)
    assert response.status == 200 and await response.json() == {"installId": install_id}
    other_key = await create_key(client, owner)
    response = await whoami(client, other_key)
    assert response.status == 400
    body = await response.json()
    assert set(body) == {"error", "hint"} and body["hint"]
    assert body["error"] == "key not linked to a pipeline install"

    # Listed with the spec's fields, status completed, the version installed.
    (listed,) = await list_installs(client, other_key)
    assert set(listed) == LIST_FIELDS
    assert listed["id"] == install_id
    assert (listed["templateId"], listed["templateName"], listed["templateSlug"]) == (
        template["id"],
        "Support Team",
        template["slug"],
    )
    assert listed["templateVersion"] == 1
    assert (listed["platform"], listed["status"], listed["companyId"]) == ("svc", "completed", None)

    # A new version of the template does not move the install (spec: never migrated automatically).
    # The creating key keeps every right it had (docs/auth.md): it releases and installs again.
    parent = await release(client, key, template["id"], team_definition(description="v2"))
    assert parent["version"] == 2
    second = await managed_install(client, key, template["id"])
    newest, oldest = await list_installs(client, key)
    assert (newest["id"], newest["templateVersion"]) == (second["installId"], 2)
    assert (oldest["id"], oldest["templateVersion"]) == (install_id, 1)
    doc = await store.installs.find_one({"_id": install_id})
    assert doc["templateVersion"] == 1 and doc["definition"].get("description") != "v2"

    # One being provisioned is not listed; one provisioned and awaiting governance approval is.
    newer = {**doc, "status": "pending", "createdAt": doc["createdAt"] + timedelta(minutes=1)}
    newer.pop("webhookTokenHash")  # unique per install
    await store.installs.insert_many(
        [{**newer, "_id": "provisioning"}, {**newer, "_id": "awaiting-approval", "approval": "pending"}]
    )
    listed = [item["id"] for item in await list_installs(client, key)]
    assert listed[0] == "awaiting-approval" and "provisioning" not in listed and len(listed) == 3


async def test_a_linked_key_keeps_every_right(make_client):
    """Spec "Installs", svc: "the API key used to create the install is immediately linked to the new
    installId (so whoami resolves)". The link takes no right away: the key still creates installs,
    manages templates, lists runs and billing and reads the secret vault (docs/auth.md). whoami
    follows the newest svc install the key created."""
    client = await make_client(rate_limit_multiplier=None)
    _, key = await user_with_key(client)
    template = await published_team(client, key)
    first = (await managed_install(client, key, template["id"]))["installId"]
    assert await (await whoami(client, key)).json() == {"installId": first}
    await patch_ok(client, key, first, "variables", {"company": "Acme"})

    second = (await managed_install(client, key, template["id"]))["installId"]
    assert await (await whoami(client, key)).json() == {"installId": second}
    await patch_ok(client, key, first, "variables", {"company": "Acme"})
    assert {i["id"] for i in await list_installs(client, key)} == {first, second}
    response = await client.post(f"/api/templates/{template['id']}/new-version", headers=bearer(key))
    assert response.status in (200, 201), await response.text()
    response = await client.get("/api/secrets/known?companyId=c&keys=A", headers=bearer(key))
    assert response.status == 200, await response.text()
    response = await client.get(f"/api/runs?templateId={template['id']}", headers=bearer(key))
    assert response.status == 200, await response.text()
    response = await client.get(f"/api/billing?templateId={template['id']}", headers=bearer(key))
    assert response.status == 200, await response.text()


async def test_managed_installs_summary_variables_and_secrets(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    owner, key = await user_with_key(client)
    template = await published_team(client, key, name="Outreach")
    install_id = (await managed_install(client, key, template["id"], company="Acme"))["installId"]

    item = await summary(client, owner, install_id)
    assert set(item) == SUMMARY_FIELDS
    assert (item["name"], item["pipelineName"], item["orgSlug"]) == ("Outreach", "Outreach", None)
    assert (item["status"], item["platform"]) == ("completed", "svc")
    assert (item["lastRunAt"], item["nextRunAt"]) == (None, None)
    assert isinstance(item["webhookToken"], str) and item["webhookToken"]
    doc = await store.installs.find_one({"_id": install_id})
    assert doc["webhookTokenHash"] == credential_digest(item["webhookToken"])
    assert item["webhookToken"] not in json.dumps(doc, default=str)
    assert item["requiredVariables"] == VARIABLES
    assert item["currentVariables"] == {"company": "Acme"}
    assert item["missingVariables"] == ["tone"]
    assert item["missingSecrets"] == SECRETS

    # Session only: a key is refused.
    assert (await client.get("/api/installs/mine", headers=bearer(key))).status == 401

    # Variables: flat and wrapped forms merge; existing keys are overwritten, others kept.
    answer = await patch_ok(client, key, install_id, "variables", {"tone": "formal"})
    assert answer == {"ok": True, "installId": install_id, "updatedKeys": ["tone"]}
    answer = await patch_ok(client, key, install_id, "variables", {"variables": {"company": "Beta"}})
    assert answer == {"ok": True, "installId": install_id, "updatedKeys": ["company"]}
    item = await summary(client, owner, install_id)
    assert item["currentVariables"] == {"company": "Beta", "tone": "formal"}
    assert item["missingVariables"] == []
    for bad in ({"tone": 5}, {"variables": {"tone": None}}, {"colour": "red"}, {}):
        response = await patch_install(client, key, install_id, "variables", bad)
        assert response.status == 400, (bad, await response.text())
    assert (await summary(client, owner, install_id))["currentVariables"] == {
        "company": "Beta",
        "tone": "formal",
    }

    # Secrets: stored encrypted, never shown; the missing list shrinks.
    raw_token, raw_crm = "raw-token-value-7f3a9c", "raw-crm-value-91be04"
    answer = await patch_ok(client, key, install_id, "secrets", {"API_TOKEN": raw_token})
    assert answer == {"ok": True, "installId": install_id, "updatedKeys": ["API_TOKEN"]}
    assert (await summary(client, owner, install_id))["missingSecrets"] == ["CRM_KEY"]
    answer = await patch_ok(client, key, install_id, "secrets", {"secrets": {"CRM_KEY": raw_crm}})
    assert answer["updatedKeys"] == ["CRM_KEY"]
    item = await summary(client, owner, install_id)
    assert item["missingSecrets"] == []
    for bad in ({"API_TOKEN": 12}, {"secrets": {"CRM_KEY": ["x"]}}, {"bad name": "x"}):
        response = await patch_install(client, key, install_id, "secrets", bad)
        assert response.status == 400, (bad, await response.text())
    doc = await store.installs.find_one({"_id": install_id})
    assert set(doc["secretsEncrypted"]) == {"API_TOKEN", "CRM_KEY"}
    everything = json.dumps([doc, await store["vault_secrets"].find().to_list(None)], default=str)
    assert raw_token not in everything and raw_crm not in everything
    assert raw_token not in json.dumps(await mine(client, owner))


async def test_delete_svc_install_cancels_it_and_removes_its_tokens(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    owner, key = await user_with_key(client)
    template = await published_team(client, key)
    install_id = (await managed_install(client, key, template["id"]))["installId"]
    token = (await summary(client, owner, install_id))["webhookToken"]
    assert await store.install_tokens.count_documents({"installId": install_id}) == 1

    response = await delete_install(client, key, install_id)
    assert response.status == 200, await response.text()
    assert await response.json() == {
        "ok": True,
        "installId": install_id,
        "platform": "svc",
        "deletedAgents": 0,
    }

    doc = await store.installs.find_one({"_id": install_id})
    assert doc["status"] == "cancelled"
    assert "webhookTokenHash" not in doc and "webhookTokenEncrypted" not in doc
    assert token not in json.dumps(doc, default=str)
    assert await store.install_tokens.count_documents({"installId": install_id}) == 0
    assert await store.installs.count_documents({"webhookTokenHash": credential_digest(token)}) == 0
    item = await summary(client, owner, install_id)
    assert (item["status"], item["webhookToken"]) == ("cancelled", None)
    (listed,) = await list_installs(client, key)
    assert listed["status"] == "cancelled"

    response = await delete_install(client, key, install_id)
    assert response.status == 409, await response.text()
    assert set(await response.json()) == {"error"}


async def test_managed_installs_reach_members_through_their_org(make_client):
    client = await make_client(rate_limit_multiplier=None)
    owner, _ = await user_with_key(client)
    outsider, _ = await user_with_key(client)
    org = await create_org(client, owner, "Acme Org")
    member = await join(client, owner, org["slug"])
    await make_pro(client, org["id"])  # org secrets are a Pro feature
    key = await org_key(client, owner, org["slug"])
    template = await published_team(client, key, name="Org Pipeline")
    install_id = (await managed_install(client, key, template["id"], tone="warm"))["installId"]
    secret = {"key": "CRM_KEY", "value": "crm-value"}
    await ok(await send(client, owner, "POST", f"/api/orgs/{org['slug']}/secrets", secret))

    item = await summary(client, member, install_id)
    assert (item["name"], item["pipelineName"], item["orgSlug"]) == ("Acme Org", "Org Pipeline", org["slug"])
    assert item["currentVariables"] == {"tone": "warm"} and item["missingVariables"] == ["company"]
    assert item["missingSecrets"] == ["API_TOKEN"]  # CRM_KEY is held by the org
    assert item["webhookToken"]
    assert await mine(client, outsider) == []


# ---- orchB installs against the fake upstream ---------------------------------------------------


async def test_orch_b_install_creates_one_upstream_agent_per_team_agent(make_client, store, fake):
    client = await make_client(rate_limit_multiplier=None)
    owner, key = await user_with_key(client)
    template = await published_team(client, key)

    created = await install_ok(
        client,
        key,
        templateId=template["id"],
        platform="orchB",
        credentials=orch_b_credentials(fake),
        variables={"company": "Acme", "tone": "dry"},
    )

    assert set(created) == CREATED_FIELDS
    assert created["platform"] == "orchB"
    upserts = [r for r in fake.requests if r.method == "POST" and r.path == "/latest/agents/upsert"]
    assert len(upserts) == 2 and len(fake.agents) == 2
    assert [(a["key"], a["name"]) for a in created["deployedAgents"]] == TEAM
    assert [a["externalId"] for a in created["deployedAgents"]] == fake.created
    # Variables are filled into the prompts sent upstream.
    assert [u.body["system_prompt"] for u in upserts] == [
        "You lead the team of Acme.",
        "You write in a dry tone.",
    ]
    assert created["platformData"]["dashboardUrl"]
    assert len(created["platformData"]["agentUrls"]) == 2

    install_id = created["installId"]
    (listed,) = await list_installs(client, key)
    assert (listed["id"], listed["platform"], listed["status"]) == (install_id, "orchB", "completed")
    # Only svc installs link the creating key, and only svc installs are managed ones.
    assert (await whoami(client, key)).status == 400
    assert await mine(client, owner) == []
    doc = await store.installs.find_one({"_id": install_id})
    assert fake.api_key not in json.dumps(doc, default=str)

    # Secrets are not accepted on orchB (spec matrix), not even after install.
    response = await patch_install(client, key, install_id, "secrets", {"API_TOKEN": "x"})
    assert response.status == 400, await response.text()

    # Deleting a non-orchC install marks it cancelled without touching the platform's resources.
    requests_before = len(fake.requests)
    response = await delete_install(client, key, install_id)
    assert response.status == 200, await response.text()
    answer = await response.json()
    assert (answer["ok"], answer["platform"], answer["deletedAgents"]) == (True, "orchB", 0)
    assert len(fake.requests) == requests_before and len(fake.agents) == 2


@pytest.mark.parametrize(
    ("fail_at", "wrong_key", "upstream_status"),
    [(1, False, 500), (2, False, 500), (None, True, 401)],
    ids=["first-upsert-fails", "second-upsert-fails", "credentials-refused"],
)
async def test_orch_b_upstream_failure_is_502_and_nothing_is_kept(
    make_client, store, fake, fail_at, wrong_key, upstream_status
):
    client = await make_client(rate_limit_multiplier=None)
    _, key = await user_with_key(client)
    template = await published_team(client, key)
    fake.fail_upsert_at = fail_at
    credentials = orch_b_credentials(fake, **({"apiKey": "rk-wrong-but-secret"} if wrong_key else {}))

    response = await install(
        client, key, templateId=template["id"], platform="orchB", credentials=credentials
    )

    text = await response.text()
    assert response.status == 502, text
    answer = await response.json()
    assert str(upstream_status) in answer["error"]
    assert answer.get("upstreamStatus") == upstream_status  # docs/installs.md: 502 {error, upstreamStatus}
    assert credentials["apiKey"] not in text
    await nothing_written(store)
    assert fake.agents == {}  # what the failed attempt created upstream was deleted again
    assert await list_installs(client, key) == []


# ---- which templates can be installed -------------------------------------------------------------


async def test_only_published_templates_the_caller_may_see_can_be_installed(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    _, key = await user_with_key(client)
    _, other_key = await user_with_key(client)
    draft = await create_template(client, key, definition=team_definition())
    archived = await published_team(client, key)
    response = await client.post(f"/api/templates/{archived['id']}/archive", headers=bearer(key))
    assert response.status == 200, await response.text()
    others_team = await published_team(client, other_key, visibility="team")

    cases = [
        (draft["id"], 409),
        (archived["id"], 409),
        ("no-such-template", 404),
        (others_team["id"], 404),
    ]
    for template_id, status in cases:
        response = await install(client, key, templateId=template_id, platform="svc")
        assert response.status == status, (template_id, await response.text())
        assert set(await response.json()) == {"error"}
    await nothing_written(store)
    # The owner of the team template may install it.
    await managed_install(client, other_key, others_team["id"])


# ---- ownership and key scoping --------------------------------------------------------------------


async def test_another_user_cannot_reach_an_install(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    owner, key = await user_with_key(client)
    intruder, intruder_key = await user_with_key(client)
    template = await published_team(client, key)
    install_id = (await managed_install(client, key, template["id"], company="Acme"))["installId"]
    before = await store.installs.find_one({"_id": install_id})

    for what, body in (("variables", {"tone": "rude"}), ("secrets", {"API_TOKEN": "stolen"})):
        response = await patch_install(client, intruder_key, install_id, what, body)
        assert response.status == 404, (what, await response.text())
    response = await delete_install(client, intruder_key, install_id)
    assert response.status == 404, await response.text()
    assert await list_installs(client, intruder_key) == []
    assert await mine(client, intruder) == []
    response = await client.post("/api/auth/keys", json={"installId": install_id}, headers=intruder.cookie)
    assert response.status == 404, await response.text()

    assert await store.installs.find_one({"_id": install_id}) == before
    assert [i["id"] for i in await list_installs(client, await create_key(client, owner))] == [install_id]


async def test_install_scoped_key_reaches_only_its_install(make_client):
    client = await make_client(rate_limit_multiplier=None)
    owner, key = await user_with_key(client)
    template = await published_team(client, key)
    first = (await managed_install(client, key, template["id"]))["installId"]
    second = (await managed_install(client, await create_key(client, owner), template["id"]))["installId"]

    scoped = await create_key(client, owner, installId=first)

    assert [i["id"] for i in await list_installs(client, scoped)] == [first]
    assert await (await whoami(client, scoped)).json() == {"installId": first}
    for what, body in (("variables", {"tone": "dry"}), ("secrets", {"API_TOKEN": "t"})):
        response = await patch_install(client, scoped, second, what, body)
        assert response.status == 404, (what, await response.text())
        await patch_ok(client, scoped, first, what, body)
    assert (await delete_install(client, scoped, second)).status == 404
    # A key created with installId may not create installs, change templates or read the vault.
    body = {"templateId": template["id"], "platform": "svc"}
    refused = await client.post("/api/installs", json=body, headers=bearer(scoped))
    assert refused.status == 403 and first in (await refused.json())["error"]
    refused = await client.post(f"/api/templates/{template['id']}/new-version", headers=bearer(scoped))
    assert refused.status == 403
    refused = await client.get("/api/secrets/known?companyId=c&keys=A", headers=bearer(scoped))
    assert refused.status == 403
    unscoped = await create_key(client, owner)
    assert {i["id"] for i in await list_installs(client, unscoped)} == {first, second}
    assert {i["status"] for i in await list_installs(client, unscoped)} == {"completed"}


# ---- the secret vault -----------------------------------------------------------------------------


async def test_secret_vault_is_keyed_by_owner_and_company(make_client, store):
    """The vault is keyed by (owner, companyId, secret name). Only orchA installs carry a companyId,
    and orchA cannot be run here; svc installs have companyId null, which GET /api/secrets/known cannot
    name (companyId is required). So this checks: PATCH secrets on svc keeps an encrypted copy under
    companyId null; the look-up for a named company does not see it; a re-install of the same owner is
    pre-filled from it (spec Authentication 9) while another owner's is not; and the look-up answers the
    held subset for a company once an entry exists there (a copy of the written entry, re-keyed to a
    company, stands in for the orchA install that would have written it)."""
    client = await make_client(rate_limit_multiplier=None)
    owner, key = await user_with_key(client)
    stranger, stranger_key = await user_with_key(client)
    template = await published_team(client, key)
    install_id = (await managed_install(client, key, template["id"]))["installId"]
    await patch_ok(client, key, install_id, "secrets", {"API_TOKEN": "vault-raw-value-42"})

    entries = await store["vault_secrets"].find().to_list(None)
    assert len(entries) == 1
    assert (entries[0]["key"], entries[0]["companyId"]) == ("API_TOKEN", None)
    assert "vault-raw-value-42" not in json.dumps(entries, default=str)

    lookup_key = await create_key(client, owner)
    known = "/api/secrets/known?companyId=company-1&keys=API_TOKEN,CRM_KEY"
    response = await client.get(known, headers=bearer(lookup_key))
    assert response.status == 200 and await response.json() == {"known": []}

    # Re-install by the same owner: the vault's secret is pre-filled. Another owner gets nothing.
    again = (await managed_install(client, lookup_key, template["id"]))["installId"]
    assert (await summary(client, owner, again))["missingSecrets"] == ["CRM_KEY"]
    theirs = (await managed_install(client, stranger_key, template["id"]))["installId"]
    assert (await summary(client, stranger, theirs))["missingSecrets"] == SECRETS

    entry = {**entries[0], "_id": "vault-entry-company-1", "companyId": "company-1"}
    await store["vault_secrets"].insert_one(entry)
    other_lookup = await create_key(client, owner)
    response = await client.get(known, headers=bearer(other_lookup))
    assert await response.json() == {"known": ["API_TOKEN"]}
    response = await client.get(known, headers=bearer(await create_key(client, stranger)))
    assert await response.json() == {"known": []}
    response = await client.get(known.replace("company-1", "company-2"), headers=bearer(other_lookup))
    assert await response.json() == {"known": []}


@pytest.mark.parametrize("query", ["", "?companyId=company-1", "?keys=API_TOKEN", "?companyId=&keys=A"])
async def test_known_secrets_needs_company_and_keys(make_client, query):
    client = await make_client(rate_limit_multiplier=None)
    _, key = await user_with_key(client)
    response = await client.get(f"/api/secrets/known{query}", headers=bearer(key))
    assert response.status == 400, await response.text()
    assert "error" in await response.json()


# ---- platforms ------------------------------------------------------------------------------------


async def test_platforms_list(client):
    response = await client.get("/api/platforms")
    assert response.status == 200, await response.text()
    platforms = {p["id"]: p for p in (await response.json())["platforms"]}
    assert set(platforms) == {"orchA", "orchB", "orchC"}  # svc is not listed
    expected_fields = {
        "orchA": [("orchABaseUrl", "text"), ("orchAApiKey", "password")],
        "orchB": [("projectId", "text"), ("apiKey", "password"), ("region", "text")],
        "orchC": [
            ("accessKeyId", "text"),
            ("secretAccessKey", "password"),
            ("region", "text"),
            ("agentResourceRoleArn", "text"),
        ],
    }
    for platform_id, platform in platforms.items():
        assert set(platform) == {"id", "label", "credentialFields", "capabilities"}
        assert isinstance(platform["label"], str) and platform["label"]
        fields = platform["credentialFields"]
        assert all(set(f) == {"key", "label", "type", "required"} for f in fields)
        assert sorted((f["key"], f["type"]) for f in fields) == sorted(expected_fields[platform_id])
        assert all(f["required"] is True and isinstance(f["label"], str) and f["label"] for f in fields)
        capabilities = platform["capabilities"]
        assert set(capabilities) == {
            "maxHierarchyDepth",
            "supportedModels",
            "billingCompleteness",
            "provisioningModel",
        }
        assert capabilities["billingCompleteness"] in ("full", "none")
        assert capabilities["provisioningModel"] == "rest"
        if platform_id == "orchC":
            assert capabilities["maxHierarchyDepth"] == 1
            models = capabilities["supportedModels"]
            assert isinstance(models, list) and models and all(isinstance(m, str) for m in models)
        else:
            assert capabilities["maxHierarchyDepth"] is None
            assert capabilities["supportedModels"] is None
