"""Template export and import (a round trip keeps the document), and version diffs."""

from __future__ import annotations

import jsonschema
import pytest

from tests.support.accounts import bearer
from tests.support.templates import agent, definition, publish_template, release, user_with_key

POLICY = {
    "accessPolicyVersion": "1",
    "mode": "report",
    "defaultAction": "deny",
    "rules": [{"match": {"host": "api.example.com"}, "action": "require_approval", "reason": "writes"}],
}
TEAM = definition(
    agent("lead", accessPolicy=POLICY),
    agent("writer", reportsTo="lead"),
    agent("sender", reportsTo="lead"),
    gates=[{"name": "review", "after": "writer"}],
    requiredVariables=["REGION"],
)


@pytest.fixture
async def client(make_client):
    return await make_client(rate_limit_multiplier=None)


def portable(document: dict) -> dict:
    """The document without what may differ between two copies (a taken slug gets a suffix)."""
    return {k: v for k, v in document.items() if k not in ("slug", "versions")}


async def test_export_import_export_round_trip_keeps_the_document(client):
    _, key = await user_with_key(client)
    template = await publish_template(
        client, key, definition=TEAM, pricingModel="per_run", priceUsdCents=25, description="Ships drafts"
    )
    await release(client, key, template["id"], {**TEAM, "description": "v2"}, change_log="tighter prompts")
    exported = await (
        await client.get(f"/api/templates/{template['id']}/export?history=true", headers=bearer(key))
    ).json()
    assert exported["format"] == "svc.template" and exported["formatVersion"] == 1
    assert [v["semver"] for v in exported["versions"]] == ["1.0.0", "1.0.1"]
    assert exported["versions"][1]["changeLog"] == "tighter prompts"
    schema = await (await client.get("/api/schema/template-export/v1.json")).json()
    jsonschema.validate(exported, schema)

    _, other = await user_with_key(client)
    imported = await client.post("/api/templates/import?pricing=true", json=exported, headers=bearer(other))
    assert imported.status == 201, await imported.text()
    draft = await imported.json()
    assert draft["status"] == "draft" and draft["id"] != template["id"]
    assert draft["slug"] != template["slug"], "a taken slug gets a suffix"
    again = await (await client.get(f"/api/templates/{draft['id']}/export", headers=bearer(other))).json()
    assert portable(again) == portable(exported)

    # Pricing comes along only when asked.
    plain = await (await client.post("/api/templates/import", json=exported, headers=bearer(other))).json()
    assert (plain["pricingModel"], plain["priceUsdCents"]) == ("free", None)


@pytest.mark.parametrize(
    ("change", "word"),
    [
        ({"definition": None}, "definition"),
        ({"formatVersion": 2}, "formatVersion: 2 is newer"),
        ({"format": "other"}, "format"),
        ({"definition": {"agents": []}}, "definition"),
        ({"slug": "Not A Slug"}, "slug"),
        ({"owner": {"kind": "user", "id": "someone"}}, "owner"),
    ],
)
async def test_a_malformed_or_newer_document_is_400_naming_the_field(client, change, word):
    _, key = await user_with_key(client)
    template = await publish_template(client, key, definition=TEAM)
    document = await (await client.get(f"/api/templates/{template['id']}/export", headers=bearer(key))).json()
    document.update(change)
    response = await client.post("/api/templates/import", json=document, headers=bearer(key))
    assert response.status == 400 and word in (await response.json())["error"]


async def test_a_diff_names_what_changed_and_flags_a_removed_agent_major(client):
    _, key = await user_with_key(client)
    template = await publish_template(client, key, definition=TEAM)
    lead, writer, _sender = TEAM["agents"]
    smaller = {**TEAM, "agents": [{**lead, "prompt": "New prompt."}, writer]}
    await release(client, key, template["id"], smaller)
    response = await client.get(f"/api/templates/{template['id']}/versions/1/diff/2", headers=bearer(key))
    assert response.status == 200, await response.text()
    diff = await response.json()
    assert diff["bump"] == "MAJOR" and "agent 'sender' removed or renamed" in diff["reasons"]
    assert diff["agents"]["removed"] == ["sender"] and diff["agents"]["added"] == []
    (changed,) = diff["agents"]["changed"]
    assert changed["key"] == "lead" and changed["fields"] == [
        {"field": "prompt", "before": lead["prompt"], "after": "New prompt."}
    ]
    by_semver = await client.get(
        f"/api/templates/{template['id']}/versions/1.0.0/diff/2.0.0", headers=bearer(key)
    )
    assert (await by_semver.json())["bump"] == "MAJOR"
    missing = await client.get(f"/api/templates/{template['id']}/versions/1/diff/9", headers=bearer(key))
    assert missing.status == 404


async def test_someone_elses_team_template_is_not_exported(client):
    _, key = await user_with_key(client)
    template = await publish_template(client, key, definition=TEAM, visibility="team")
    _, other = await user_with_key(client)
    response = await client.get(f"/api/templates/{template['id']}/export", headers=bearer(other))
    assert response.status == 404
