"""Deployment governance end to end: a gated install waits, the webhook refuses it, a decision settles it."""

from __future__ import annotations

from typing import Any

from tests.support.accounts import app_store, bearer
from tests.support.installs import (
    list_installs,
    managed_install,
    mine,
    orch_b_credentials,
    published_team,
    start_fake_orch_b,
)
from tests.support.orgs import World, audit_actions, last_mail, make_pro, ok, org_key, send, world
from tests.support.runtime import provider_settings, start_llm, webhook_token


async def governed(make_client: Any, aiohttp_server: Any) -> tuple[Any, World, str, Any]:
    llm, url = await start_llm(aiohttp_server)
    client = await make_client(rate_limit_multiplier=None, providers=provider_settings(url))
    w = await world(client, pro=True)
    await ok(await send(client, w.admin, "PATCH", f"{w.base}/settings/governance", {"enabled": True}))
    key = await org_key(client, w.admin, w.slug)  # the admin created the key: the requestor
    return client, w, key, llm


async def test_approved_install_becomes_ready(make_client, aiohttp_server):
    client, w, key, llm = await governed(make_client, aiohttp_server)
    template = await published_team(client, key, name="Gated Team")
    created = await managed_install(client, key, template["id"], company="Acme", tone="dry")
    install_id = created["installId"]
    assert created["status"] == "pending" and created["approvalId"]

    # Provisioned, listed as pending, but not ready for triggers.
    assert [(i["id"], i["status"]) for i in await list_installs(client, key)] == [(install_id, "pending")]
    (summary,) = [i for i in await mine(client, w.member) if i["id"] == install_id]
    assert summary["status"] == "pending"
    token = await webhook_token(client, w.member, install_id)
    refused = await client.post(f"/api/webhook/{token}", json={"inputText": "go"})
    assert refused.status == 409
    assert await refused.json() == {"error": "Install is not ready (status: pending)"}
    run = await client.post(f"/api/installs/{install_id}/run", json={"task": "x"}, headers=bearer(key))
    assert run.status == 409

    # The request exists and every owner and admin was emailed.
    approvals = (await ok(await send(client, w.member, "GET", f"{w.base}/approvals?status=pending")))[
        "approvals"
    ]
    (approval,) = approvals
    assert (approval["installId"], approval["templateName"], approval["status"]) == (
        install_id,
        "Gated Team",
        "pending",
    )
    assert (approval["requestedBy"], approval["requestedByEmail"]) == (w.admin.id, w.admin.email)
    for manager in (w.owner, w.admin):
        mail = await last_mail(client, manager.email, "org_approval_requested")
        assert "Gated Team" in mail["subject"]
    assert (
        await app_store(client)["outbox"].count_documents(
            {"to": w.member.email, "kind": "org_approval_requested"}
        )
        == 0
    )

    # Members cannot decide; the owner approves; a second decision is refused.
    path = f"{w.base}/approvals/{approval['id']}"
    assert (await send(client, w.member, "PATCH", path, {"status": "approved"})).status == 403
    decided = await ok(await send(client, w.owner, "PATCH", path, {"status": "approved", "note": "ship it"}))
    assert decided["approval"]["status"] == "approved" and decided["approval"]["reviewedBy"] == w.owner.id
    assert decided["approval"]["note"] == "ship it" and decided["approval"]["reviewedAt"]
    again = await send(client, w.admin, "PATCH", path, {"status": "rejected"})
    assert again.status == 409
    assert (await send(client, w.owner, "PATCH", path, {"status": "pending"})).status == 400
    mail = await last_mail(client, w.admin.email, "org_approval_decided")
    assert "approved" in mail["subject"] and "ship it" in mail["body"]

    # Ready: the webhook queues a run.
    assert [i["status"] for i in await list_installs(client, key)] == ["completed"]
    llm.script(text="done")
    queued = await client.post(f"/api/webhook/{token}", json={"inputText": "go"})
    assert queued.status == 200 and (await queued.json())["status"] == "queued"
    listed = (await ok(await send(client, w.member, "GET", f"{w.base}/approvals?status=approved")))[
        "approvals"
    ]
    assert [a["id"] for a in listed] == [approval["id"]]
    assert (await send(client, w.member, "GET", f"{w.base}/approvals?status=bogus")).status == 400


async def test_rejected_install_is_cancelled(make_client, aiohttp_server):
    client, w, key, _ = await governed(make_client, aiohttp_server)
    template = await published_team(client, key, name="Rejected Team")
    install_id = (await managed_install(client, key, template["id"]))["installId"]
    token = await webhook_token(client, w.owner, install_id)
    (approval,) = (await ok(await send(client, w.owner, "GET", f"{w.base}/approvals")))["approvals"]
    body = {"status": "rejected", "note": "not this quarter"}
    await ok(await send(client, w.admin, "PATCH", f"{w.base}/approvals/{approval['id']}", body))
    assert [i["status"] for i in await list_installs(client, key)] == ["cancelled"]
    assert (await client.post(f"/api/webhook/{token}", json={})).status == 404, "the webhook token is revoked"
    assert await app_store(client).install_tokens.count_documents({"installId": install_id}) == 0
    mail = await last_mail(client, w.admin.email, "org_approval_decided")
    assert "rejected" in mail["subject"] and "not this quarter" in mail["body"]


async def test_without_governance_or_pro_installs_are_ready_at_once(make_client, aiohttp_server):
    client, w, key, _ = await governed(make_client, aiohttp_server)
    await ok(await send(client, w.owner, "PATCH", f"{w.base}/settings/governance", {"enabled": False}))
    template = await published_team(client, key)
    created = await managed_install(client, key, template["id"])
    assert "status" not in created
    assert [i["status"] for i in await list_installs(client, key)] == ["completed"]
    # Personal installs of a member never wait for the org.
    assert (await ok(await send(client, w.owner, "GET", f"{w.base}/approvals")))["approvals"] == []


async def test_manual_approval_requests(make_client, aiohttp_server):
    client, w, key, _ = await governed(make_client, aiohttp_server)
    await ok(await send(client, w.owner, "PATCH", f"{w.base}/settings/governance", {"enabled": False}))
    template = await published_team(client, key, name="Manual")
    install_id = (await managed_install(client, key, template["id"]))["installId"]
    body = {"installId": install_id, "templateId": template["id"], "templateName": "Manual"}
    created = await ok(await send(client, w.member, "POST", f"{w.base}/approvals", body))
    approval = created["approval"]
    assert (approval["status"], approval["requestedBy"], approval["requestedByEmail"]) == (
        "pending",
        w.member.id,
        w.member.email,
    )
    assert approval["orgId"] == w.org["id"]
    # The request names the install's template, not text the requester typed.
    wrong = {**body, "templateId": "some-other-template"}
    assert (await send(client, w.member, "POST", f"{w.base}/approvals", wrong)).status == 400
    for manager in (w.owner, w.admin):
        await last_mail(client, manager.email, "org_approval_requested")
    await ok(
        await send(client, w.admin, "PATCH", f"{w.base}/approvals/{approval['id']}", {"status": "approved"})
    )
    await last_mail(client, w.member.email, "org_approval_decided")
    # An install of another tenant cannot be named.
    other = await world(client, pro=True)
    other_key = await org_key(client, other.owner, other.slug)
    foreign = await published_team(client, other_key)
    foreign_install = (await managed_install(client, other_key, foreign["id"]))["installId"]
    body = {"installId": foreign_install, "templateId": foreign["id"], "templateName": "x"}
    assert (await send(client, w.member, "POST", f"{w.base}/approvals", body)).status == 404
    # A decision on another org's request is 404.
    assert (
        await send(
            client, other.owner, "PATCH", f"{other.base}/approvals/{approval['id']}", {"status": "approved"}
        )
    ).status == 404


async def test_waiting_installs_are_approved_when_the_plan_lapses(make_client, aiohttp_server):
    client, w, key, _ = await governed(make_client, aiohttp_server)
    template = await published_team(client, key, name="Lapsing")
    install_id = (await managed_install(client, key, template["id"], company="Acme", tone="dry"))["installId"]
    assert [i["status"] for i in await list_installs(client, key)] == ["pending"]
    await make_pro(client, w.org["id"], status="cancelled")  # the provider ended the subscription
    assert [i["status"] for i in await list_installs(client, key)] == ["completed"]
    approvals = await app_store(client)["org_approvals"].find({"installId": install_id}).to_list(None)
    assert [(a["status"], a["reviewedBy"]) for a in approvals] == [("approved", None)]
    events = [e for e in await audit_actions(client, w.org["id"]) if e["action"] == "approval.approved"]
    assert events and events[-1]["actorId"] is None
    await last_mail(client, w.admin.email, "org_approval_decided")


async def test_waiting_installs_keep_waiting_while_the_payment_is_past_due(make_client, aiohttp_server):
    """Issue #23: `past_due` is a payment retry, not the end of the plan; only the end approves."""
    client, w, key, _ = await governed(make_client, aiohttp_server)
    template = await published_team(client, key, name="Retrying")
    install_id = (await managed_install(client, key, template["id"], company="Acme", tone="dry"))["installId"]
    await make_pro(client, w.org["id"], status="past_due")  # the provider retries the payment
    assert [i["status"] for i in await list_installs(client, key)] == ["pending"]
    approvals = await app_store(client)["org_approvals"].find({"installId": install_id}).to_list(None)
    assert [a["status"] for a in approvals] == ["pending"]
    assert "approval.approved" not in [e["action"] for e in await audit_actions(client, w.org["id"])]
    await make_pro(client, w.org["id"], status="active")  # the retry succeeded: still governed
    (approval,) = (await ok(await send(client, w.owner, "GET", f"{w.base}/approvals")))["approvals"]
    assert approval["status"] == "pending"


async def test_a_rejected_install_on_a_platform_is_removed_upstream(make_client, aiohttp_server, monkeypatch):
    fake = await start_fake_orch_b(aiohttp_server, monkeypatch)
    client, w, key, _ = await governed(make_client, aiohttp_server)
    template = await published_team(client, key, name="Upstream Team")
    body = {"templateId": template["id"], "platform": "orchB", "credentials": orch_b_credentials(fake)}
    response = await client.post("/api/installs", json=body, headers=bearer(key))
    created = await response.json()
    assert response.status == 201 and created["status"] == "pending", created
    assert len(fake.agents) == len(created["deployedAgents"]) > 0
    (approval,) = (await ok(await send(client, w.owner, "GET", f"{w.base}/approvals")))["approvals"]
    await ok(
        await send(client, w.owner, "PATCH", f"{w.base}/approvals/{approval['id']}", {"status": "rejected"})
    )
    assert fake.agents == {}, "the rejected deployment's agents are deleted upstream"
    assert [i["status"] for i in await list_installs(client, key)] == ["cancelled"]
