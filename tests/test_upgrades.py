"""Moving an install between versions over HTTP: what is available, the plan, apply, roll back,
bad input, tenant isolation, and what is recorded and mailed (docs/upgrades.md)."""

from __future__ import annotations

from typing import Any

from tests.support.accounts import app_store, bearer
from tests.support.installs import install_ok, mine
from tests.support.templates import agent, publish_template, user_with_key
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
        "version": 2, "semver": "1.0.1", "bump": "PATCH", "widensPermissions": False
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
