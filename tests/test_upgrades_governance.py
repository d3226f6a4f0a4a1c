"""Governance over version moves, over HTTP: under an org's governance a MAJOR or widening move
waits for an owner's or admin's approval through the existing flow and mail; a MINOR or PATCH one
follows the org's `upgradeApproval` setting (docs/upgrades.md)."""

from __future__ import annotations

from typing import Any

from tests.support.accounts import app_store, bearer
from tests.support.installs import install_ok
from tests.support.orgs import World, audit_actions, last_mail, ok, org_key, send, world
from tests.support.templates import agent, publish_template
from tests.support.upgrades import move, move_ok, policy, publish_next, team, versions, with_agents


async def governed(client: Any) -> tuple[World, str, dict[str, Any], str]:
    """A Pro org with an svc install of its own template (made before governance was on), then
    governance on."""
    w = await world(client, pro=True)
    key = await org_key(client, w.admin, w.slug)  # the admin created the key: the requester
    template = await publish_template(client, key, definition=team(), name="Gated Team")
    install_id = (await install_ok(client, key, templateId=template["id"], platform="svc"))["installId"]
    await ok(await send(client, w.admin, "PATCH", f"{w.base}/settings/governance", {"enabled": True}))
    return w, key, template, install_id


async def test_a_major_upgrade_waits_for_approval_and_is_applied_when_approved(client):
    w, key, template, install_id = await governed(client)
    headers = bearer(key)
    newer = {**team(), "requiredSecrets": ["CRM_KEY"]}
    await publish_next(client, key, template["id"], newer, "needs a CRM key")
    plan = (await move_ok(client, headers, install_id, dryRun=True))["plan"]
    assert plan["approvalRequired"] is True and plan["approvalReason"] == "it is a MAJOR (breaking) change"

    asked = await move_ok(client, headers, install_id, secrets={"CRM_KEY": "k"})
    assert asked["status"] == "pending_approval" and asked["approvalId"]
    state = await versions(client, headers, install_id)
    assert state["currentVersion"] == 1
    assert state["pendingUpgrade"]["approvalId"] == asked["approvalId"]
    assert state["pendingUpgrade"]["toVersion"] == 2
    again = await move(client, headers, install_id, secrets={"CRM_KEY": "k"})
    assert again.status == 409
    assert await again.json() == {"error": "A change to version 2 awaits the org's approval"}

    listed = (await ok(await send(client, w.member, "GET", f"{w.base}/approvals?status=pending")))[
        "approvals"
    ]
    (approval,) = listed
    assert approval["id"] == asked["approvalId"] and approval["requestedBy"] == w.admin.id
    assert approval["upgrade"] == {
        "fromVersion": 1,
        "toVersion": 2,
        "direction": "upgrade",
        "bump": "MAJOR",
        "reason": "it is a MAJOR (breaking) change",
    }
    for manager in (w.owner, w.admin):
        mail = await last_mail(client, manager.email, "org_approval_requested")
        assert mail["subject"] == "Upgrade approval requested: Gated Team"
        assert "from version 1 to 2" in mail["body"]

    path = f"{w.base}/approvals/{approval['id']}"
    assert (await send(client, w.member, "PATCH", path, {"status": "approved"})).status == 403
    await ok(await send(client, w.owner, "PATCH", path, {"status": "approved", "note": "fine"}))
    state = await versions(client, headers, install_id)
    assert state["currentVersion"] == 2 and state["pendingUpgrade"] is None
    assert state["history"][0]["via"] == "approval" and state["history"][0]["actorId"] == w.admin.id
    store = app_store(client)
    install = await store.installs.find_one({"_id": install_id})
    assert set(install["secretsEncrypted"]) == {"CRM_KEY"}, "the values sent with the request applied"
    assert "Upgrade approved" in (await last_mail(client, w.admin.email, "org_approval_decided"))["subject"]
    actions = [event["action"] for event in await audit_actions(client, w.org["id"])]
    assert actions[-3:] == ["approval.requested", "install.upgraded", "approval.approved"]
    timeline = [e["action"] for e in await store["timeline"].find({"installId": install_id}).to_list(None)]
    assert "install.upgrade_requested" in timeline and "install.upgraded" in timeline


async def test_a_patch_follows_the_orgs_setting_and_a_rejection_leaves_the_install(client):
    w, key, template, install_id = await governed(client)
    headers = bearer(key)
    await publish_next(client, key, template["id"], team("v2"), "patch")
    moved = await move_ok(client, headers, install_id)
    assert moved["status"] == "upgraded", "by default only MAJOR or widening moves wait"
    actions = [event["action"] for event in await audit_actions(client, w.org["id"])]
    assert actions[-1] == "install.upgraded"

    body = {"enabled": True, "upgradeApproval": "all"}
    org = (await ok(await send(client, w.owner, "PATCH", f"{w.base}/settings/governance", body)))["org"]
    assert org["upgradeApproval"] == "all"
    asked = await move_ok(client, headers, install_id, "rollback")
    assert asked["status"] == "pending_approval"
    assert asked["plan"]["approvalReason"] == "the org requires approval for every version change"
    path = f"{w.base}/approvals/{asked['approvalId']}"
    await ok(await send(client, w.admin, "PATCH", path, {"status": "rejected", "note": "not now"}))
    state = await versions(client, headers, install_id)
    assert state["currentVersion"] == 2 and state["pendingUpgrade"] is None
    timeline = await app_store(client)["timeline"].find_one({"action": "install.upgrade_rejected"})
    assert timeline is not None and timeline["installId"] == install_id
    assert (await move_ok(client, headers, install_id, "rollback"))["status"] == "pending_approval"


async def test_a_widening_minor_waits_even_under_the_default_setting(client):
    w, key, template, install_id = await governed(client)
    headers = bearer(key)
    wider = with_agents(
        team(),
        agent(
            "lead", name="Lead", prompt="You lead.", accessPolicy=policy("a.example.com", "api.example.com")
        ),
    )
    await publish_next(client, key, template["id"], wider, "wider")
    plan = (await move_ok(client, headers, install_id, dryRun=True))["plan"]
    assert plan["bump"] == "MINOR" and plan["approvalReason"] == "it lets agents reach more than before"
    asked = await move_ok(client, headers, install_id, acceptPermissions=plan["permissions"]["acceptance"])
    assert asked["status"] == "pending_approval"
    await ok(
        await send(
            client, w.owner, "PATCH", f"{w.base}/approvals/{asked['approvalId']}", {"status": "approved"}
        )
    )
    assert (await versions(client, headers, install_id))["currentVersion"] == 2
