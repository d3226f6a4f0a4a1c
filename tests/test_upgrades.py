"""Moving an install between versions over HTTP: what is available, the plan, apply, roll back,
bad input, tenant isolation, and what is recorded and mailed (docs/upgrades.md)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from svc.core import aware, utcnow
from tests.support.accounts import app_store, bearer, create_key
from tests.support.installs import install_ok, mine
from tests.support.templates import (
    agent,
    definition,
    new_version_ok,
    patch_ok,
    publish_ok,
    publish_template,
    user_with_key,
)
from tests.support.upgrades import (
    move,
    move_ok,
    plan_of,
    policy,
    publish_next,
    team,
    versions,
    with_agents,
)


async def world(client: Any, **fields: Any) -> tuple[Any, str, dict[str, Any], str]:
    """A deployer who published a one-agent team (v1) and installed it on svc."""
    caller, key = await user_with_key(client)
    template = await publish_template(client, key, definition=team(), **fields)
    made = await install_ok(client, key, templateId=template["id"], platform="svc")
    return caller, key, template, made["installId"]


async def test_a_patch_release_is_offered_planned_applied_and_rolled_back(client):
    caller, key, template, install_id = await world(client)
    headers = bearer(key)
    before = await versions(client, headers, install_id)
    assert before["currentVersion"] == 1 and before["updateAvailable"] is False
    assert before["history"][0]["action"] == "install"

    await publish_next(client, key, template["id"], team("You lead, briefly."), "shorter prompt")
    offered = await versions(client, headers, install_id)
    assert offered["updateAvailable"] is True
    assert (offered["latestVersion"], offered["latestSemver"], offered["bump"]) == (2, "1.0.1", "PATCH")
    assert [entry["changeLog"] for entry in offered["changeLogs"]] == ["shorter prompt"]
    summary = next(item for item in await mine(client, caller) if item["id"] == install_id)
    assert summary["updateAvailable"] == {
        "version": 2,
        "semver": "1.0.1",
        "bump": "PATCH",
        "widensPermissions": False,
    }

    plan = await plan_of(client, headers, install_id)
    assert plan["from"]["version"] == 1 and plan["to"]["version"] == 2 and plan["bump"] == "PATCH"
    assert plan["ready"] is True and plan["permissions"]["widened"] is False
    assert plan["platform"]["inPlace"] is True
    assert plan["platform"]["changes"] == [{"key": "lead", "action": "update", "detail": "changes prompt"}]
    assert (await versions(client, headers, install_id))["currentVersion"] == 1  # a dry run changes nothing

    moved = await move_ok(client, headers, install_id)
    assert (moved["status"], moved["fromVersion"], moved["toVersion"]) == ("upgraded", 1, 2)
    after = await versions(client, headers, install_id)
    assert (after["currentVersion"], after["previousVersion"], after["updateAvailable"]) == (2, 1, False)
    assert [e["action"] for e in after["history"]] == ["upgrade", "install"]

    back = await move_ok(client, headers, install_id, "rollback")
    assert (back["status"], back["toVersion"]) == ("rolled_back", 1)
    final = await versions(client, headers, install_id)
    assert final["currentVersion"] == 1 and final["updateAvailable"] is True
    assert [e["action"] for e in final["history"]] == ["rollback", "upgrade", "install"]

    store = app_store(client)
    install = await store.installs.find_one({"_id": install_id})
    assert install["definition"]["agents"][0]["prompt"] == "You lead."
    timeline = await store["timeline"].find({"installId": install_id, "kind": "version"}).to_list(None)
    assert sorted(entry["action"] for entry in timeline) == ["install.rolled_back", "install.upgraded"]
    kinds = ["install.upgraded", "install.rolled_back"]
    mails = await store["outbox"].find({"kind": {"$in": kinds}}).to_list(None)
    assert sorted(m["kind"] for m in mails) == ["install.rolled_back", "install.upgraded"]
    assert all(m["to"] == caller.email for m in mails)


async def test_another_owners_install_is_not_found(client):
    _, key, template, install_id = await world(client)
    await publish_next(client, key, template["id"], team("v2"), "v2")
    _, stranger = await user_with_key(client)
    for path in ("versions",):
        response = await client.get(f"/api/installs/{install_id}/{path}", headers=bearer(stranger))
        assert response.status == 404
    for direction in ("upgrade", "rollback"):
        response = await move(client, bearer(stranger), install_id, direction, dryRun=True)
        assert response.status == 404
        assert (await response.json()) == {"error": "Install not found"}


def lead(prompt: str = "You lead.", **fields: Any) -> dict[str, Any]:
    return agent("lead", name="Lead", prompt=prompt, **{"accessPolicy": policy("api.example.com"), **fields})


LOCKED_HELPER = agent(
    "helper", name="Helper", accessPolicy={"accessPolicyVersion": "1", "defaultAction": "deny"}
)
BASE = team()
DOCS = {"mcpServers": [{"name": "docs", "url": "https://mcp.example.com/mcp"}]}

CLASSES = [
    ("a prompt changed", with_agents(BASE, lead("You lead, kindly.")), "PATCH", False),
    ("a model changed", with_agents(BASE, lead(model="providerB:standard")), "PATCH", False),
    ("an agent added that reaches nothing", with_agents(BASE, lead(), LOCKED_HELPER), "MINOR", False),
    (
        "an agent added without a policy",
        with_agents(BASE, lead(), agent("helper", name="Helper")),
        "MINOR",
        True,
    ),
    ("a host removed from the policy", with_agents(BASE, lead(accessPolicy=policy())), "MINOR", False),
    (
        "a host added to the policy",
        with_agents(BASE, lead(accessPolicy=policy("api.example.com", "*.crm.example.com"))),
        "MINOR",
        True,
    ),
    ("the policy dropped", with_agents(BASE, lead(accessPolicy=None)), "MINOR", True),
    (
        "a gate added",
        {**BASE, "gates": [{"name": "review", "after": "lead", "kind": "approval"}]},
        "MINOR",
        False,
    ),
    (
        "the agent renamed",
        with_agents(BASE, agent("chief", name="Lead", accessPolicy=policy("api.example.com"))),
        "MAJOR",
        False,
    ),
    (
        "a new required variable",
        {**with_agents(BASE, lead("Lead {{company}}.")), "requiredVariables": ["company"]},
        "MAJOR",
        False,
    ),
    ("a new required secret", {**BASE, "requiredSecrets": ["CRM_KEY"]}, "MAJOR", False),
    (
        "an MCP server given to the agent",
        {**with_agents(BASE, lead(mcpServers=["docs"])), **DOCS},
        "MINOR",
        True,
    ),
]


@pytest.mark.parametrize(("what", "new", "bump", "widened"), CLASSES, ids=[c[0] for c in CLASSES])
async def test_the_class_of_a_move_follows_the_rules_from_real_definition_changes(
    client, what, new, bump, widened
):
    _, key, template, install_id = await world(client)
    await publish_next(client, key, template["id"], new, what)
    offered = await versions(client, bearer(key), install_id)
    assert (offered["bump"], offered["widensPermissions"]) == (bump, widened), offered["reasons"]
    plan = await plan_of(client, bearer(key), install_id)
    assert (plan["bump"], plan["permissions"]["widened"]) == (bump, widened)
    assert (plan["permissions"]["acceptance"] is not None) is widened


async def test_a_new_required_secret_the_install_already_holds_breaks_nothing_for_it(client):
    _, key, template, install_id = await world(client)
    response = await client.patch(
        f"/api/installs/{install_id}/secrets", json={"CRM_KEY": "held"}, headers=bearer(key)
    )
    assert response.status == 200, await response.text()
    released = await publish_next(
        client, key, template["id"], {**BASE, "requiredSecrets": ["CRM_KEY"]}, "crm"
    )
    assert released["semver"] == "2.0.0", "for a fresh deployer it is breaking"
    plan = await plan_of(client, bearer(key), install_id)
    assert plan["bump"] == "PATCH" and plan["missing"] == {"variables": [], "secrets": []}


async def test_the_plan_names_agents_added_removed_renamed_and_each_reach_change(client):
    _, key = await user_with_key(client)
    writer = agent("writer", name="Writer", accessPolicy=policy("mail.example.com"))
    first = definition(lead(), writer, agent("old", name="Old"))
    template = await publish_template(client, key, definition=first)
    install_id = (await install_ok(client, key, templateId=template["id"], platform="svc"))["installId"]
    renamed = agent("scribe", name="Writer", accessPolicy=policy("mail.example.com", "cdn.example.com"))
    newer = definition(lead(accessPolicy=policy()), renamed, LOCKED_HELPER)
    await publish_next(client, key, template["id"], newer, "reshuffle")
    plan = await plan_of(client, bearer(key), install_id)
    assert plan["agents"] == {
        "added": ["helper"],
        "removed": ["old"],
        "renamed": [{"from": "writer", "to": "scribe"}],
    }
    changes = {c["agent"]: c for c in plan["permissions"]["changes"]}
    assert changes["lead"]["narrowed"] == [
        {
            "host": "api.example.com",
            "methods": ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
            "path": "any path",
            "before": "allow",
            "after": "deny",
        },
    ]
    assert changes["scribe"]["change"] == "renamed" and changes["scribe"]["renamedFrom"] == "writer"
    assert [w["host"] for w in changes["scribe"]["widened"]] == ["cdn.example.com"]
    assert changes["helper"] == {
        "agent": "helper",
        "change": "added",
        "widened": [],
        "narrowed": [],
        "mcp": [],
    }
    assert changes["old"]["change"] == "removed"
    actions = {c["key"]: c["action"] for c in plan["platform"]["changes"]}
    assert actions == {
        "lead": "update",
        "scribe": "create",
        "helper": "create",
        "writer": "remove",
        "old": "remove",
    }
    assert plan["bump"] == "MAJOR" and plan["permissions"]["widened"] is True


# ---- bad input ---------------------------------------------------------------------------


async def test_targets_that_are_not_this_installs_next_version_are_refused(client):
    _, key, template, install_id = await world(client)
    headers = bearer(key)
    other = await publish_template(client, key, definition=team())
    answers = {
        "unpublished": await move(client, headers, install_id, version=9),
        "another template": await move(client, headers, install_id, templateId=other["id"]),
        "nothing newer": await move(client, headers, install_id),
        "nothing older": await move(client, headers, install_id, "rollback"),
    }
    assert answers["unpublished"].status == 404
    assert await answers["unpublished"].json() == {"error": "Version 9 of this template is not published"}
    assert answers["another template"].status == 400
    assert answers["nothing newer"].status == 409
    assert await answers["nothing newer"].json() == {"error": "Install is already on version 1"}
    assert answers["nothing older"].status == 409
    assert await answers["nothing older"].json() == {
        "error": "Install has no earlier version to roll back to"
    }

    await publish_next(client, key, template["id"], team("v2"), "v2")
    await move_ok(client, headers, install_id)
    older = await move(client, headers, install_id, version=1)
    assert older.status == 400 and "use POST" in (await older.json())["error"]
    newer = await move(client, headers, install_id, "rollback", version=2)
    assert newer.status == 409  # already on it
    await move_ok(client, headers, install_id, "rollback")
    again = await move(client, headers, install_id, "rollback")  # the version left is 2, not older
    assert again.status == 409
    assert await again.json() == {"error": "Install has no earlier version to roll back to"}
    for body in (
        {"version": "two"},
        {"version": 0},
        {"dryRun": "yes"},
        {"variables": ["a"]},
        {"version": 2**40},
    ):
        response = await move(client, headers, install_id, "rollback", **body)
        assert response.status == 400, (body, await response.text())
        assert set(await response.json()) == {"error"}

    removed = await client.delete(f"/api/installs/{install_id}", headers=headers)
    assert removed.status == 200, await removed.text()
    cancelled = await move(client, headers, install_id, "rollback")
    assert cancelled.status == 409 and await cancelled.json() == {"error": "Install is cancelled"}


async def test_missing_values_are_listed_and_sent_values_applied(client):
    _, key, template, install_id = await world(client)
    headers = bearer(key)
    newer = {
        **with_agents(BASE, lead("Lead {{company}}.")),
        "requiredVariables": ["company"],
        "requiredSecrets": ["CRM_KEY"],
    }
    await publish_next(client, key, template["id"], newer, "needs values")
    plan = await plan_of(client, headers, install_id)
    assert plan["missing"] == {"variables": ["company"], "secrets": ["CRM_KEY"]} and plan["ready"] is False
    refused = await move(client, headers, install_id)
    assert refused.status == 400
    body = await refused.json()
    assert body["error"].startswith(
        "Version 2 needs values this install lacks: variables company; secrets CRM_KEY"
    )
    assert (body["missingVariables"], body["missingSecrets"]) == (["company"], ["CRM_KEY"])
    unknown = await move(client, headers, install_id, variables={"nope": "x"})
    assert unknown.status == 400 and "variables.nope" in (await unknown.json())["error"]
    store = app_store(client)
    assert (await store.installs.find_one({"_id": install_id}))["templateVersion"] == 1

    moved = await move_ok(
        client,
        headers,
        install_id,
        variables={"company": "Acme"},
        secrets={"CRM_KEY": "s3cret"},
        status="cancelled",
        owner={"kind": "user", "id": "x"},  # fields it does not take are ignored
    )
    assert moved["status"] == "upgraded"
    install = await store.installs.find_one({"_id": install_id})
    assert install["variables"] == {"company": "Acme"} and install["status"] == "completed"
    assert set(install["secretsEncrypted"]) == {"CRM_KEY"} and "s3cret" not in str(
        install["secretsEncrypted"]
    )
    timeline = await store["timeline"].find_one({"installId": install_id, "action": "install.upgraded"})
    assert timeline["meta"]["secretsSet"] == ["CRM_KEY"] and "s3cret" not in str(timeline)


async def test_widened_permissions_must_be_accepted_with_the_plans_digest(client):
    _, key, template, install_id = await world(client)
    headers = bearer(key)
    wider = with_agents(BASE, lead(accessPolicy=policy("api.example.com", "evil.example.net")))
    await publish_next(client, key, template["id"], wider, "more hosts")
    plan = await plan_of(client, headers, install_id)
    digest = plan["permissions"]["acceptance"]
    assert [w["host"] for w in plan["permissions"]["changes"][0]["widened"]] == ["evil.example.net"]
    missing = await move(client, headers, install_id)
    assert missing.status == 400 and (await missing.json())["acceptance"] == digest
    wrong = await move(client, headers, install_id, acceptPermissions="0" * 32)
    assert wrong.status == 400 and "does not match" in (await wrong.json())["error"]
    moved = await move_ok(client, headers, install_id, acceptPermissions=digest)
    assert moved["status"] == "upgraded"


async def test_an_agent_given_an_mcp_server_is_widened_reach_to_accept(client):
    caller, key, template, install_id = await world(client)
    headers = bearer(key)
    await publish_next(
        client, key, template["id"], {**with_agents(BASE, lead(mcpServers=["docs"])), **DOCS}, "docs"
    )
    plan = await plan_of(client, headers, install_id)
    assert plan["permissions"]["changes"] == [
        {
            "agent": "lead",
            "change": "changed",
            "widened": [],
            "narrowed": [],
            "mcp": ["may use MCP server 'docs'"],
        }
    ]
    assert (await versions(client, headers, install_id))["widensPermissions"] is True
    cookie = {"Cookie": f"svc_session={caller.session}"}
    page = await client.get(f"/installs/{install_id}/versions", headers=cookie)
    assert "MCP: may use MCP server &#39;docs&#39;" in await page.text()
    missing = await move(client, headers, install_id)
    body = await missing.json()
    assert missing.status == 400 and "reach more than before (lead)" in body["error"]
    assert body["acceptance"] == plan["permissions"]["acceptance"]
    moved = await move_ok(client, headers, install_id, acceptPermissions=body["acceptance"])
    assert moved["status"] == "upgraded"


async def test_a_key_scoped_to_the_install_reads_versions_but_cannot_move_it(client):
    caller, key, template, install_id = await world(client)
    await publish_next(client, key, template["id"], team("v2"), "v2")
    scoped = await create_key(client, caller, installId=install_id)
    assert (await versions(client, bearer(scoped), install_id))["updateAvailable"] is True
    assert (await plan_of(client, bearer(scoped), install_id))["to"]["version"] == 2
    refused = await move(client, bearer(scoped), install_id)
    assert refused.status == 403


# ---- races -------------------------------------------------------------------------------


async def test_moves_at_once_give_one_winner_and_409s(client):
    _, key, template, install_id = await world(client)
    headers = bearer(key)
    await publish_next(client, key, template["id"], team("v2"), "v2")
    for round_ in range(6):
        direction = "upgrade" if round_ % 2 == 0 else "rollback"
        answers = await asyncio.gather(*(move(client, headers, install_id, direction) for _ in range(6)))
        statuses = sorted(answer.status for answer in answers)
        assert statuses == [200] + [409] * 5, statuses
        expected = 2 if direction == "upgrade" else 1
        assert (await versions(client, headers, install_id))["currentVersion"] == expected
    history = (await versions(client, headers, install_id))["history"]
    assert len(history) == 7, "one entry per winning move, plus the install"


# ---- price changes between versions ------------------------------------------------------


async def test_a_version_with_a_new_price_follows_the_price_change_rules(client):
    caller, key = await user_with_key(client)
    template = await publish_template(
        client, key, definition=team(), pricingModel="per_run", priceUsdCents=10
    )
    install_id = (await install_ok(client, key, templateId=template["id"], platform="svc"))["installId"]
    draft = await new_version_ok(client, key, template["id"])
    await patch_ok(client, key, draft["id"], definition=team("v2"), pricingModel="per_run", priceUsdCents=25)
    published = await publish_ok(client, key, draft["id"], changeLog="dearer")
    store = app_store(client)
    stored = await store["templates"].find_one({"_id": template["id"]})
    scheduled = stored["priceHistory"][-1]
    assert (scheduled["pricingModel"], scheduled["priceUsdCents"]) == ("per_run", 25)
    assert aware(scheduled["from"]) > utcnow(), "the new price waits for the next period"
    assert published["priceUsdCents"] == 25
    notice = await store["outbox"].find_one({"kind": "template.price_change"})
    assert notice is not None and notice["to"] == caller.email and "$0.25 per run" in notice["subject"]

    plan = await plan_of(client, bearer(key), install_id)
    assert plan["pricing"]["inForce"]["label"] == "$0.10 per run"
    assert plan["pricing"]["version"]["label"] == "$0.25 per run"
    assert [s["label"] for s in plan["pricing"]["scheduled"]] == ["$0.25 per run"]
