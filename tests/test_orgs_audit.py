"""The org audit log: every required action with its actor, newest-first paging, and no way to edit it."""

from __future__ import annotations

from datetime import timedelta

from api.context import ROUTE_TABLE
from svc.core.clock import iso, utcnow
from tests.support.accounts import app_store
from tests.support.orgs import invite, join, make_pro, ok, send, world


def seed_install(org_id: str, install_id: str) -> dict:
    return {
        "_id": install_id,
        "owner": {"kind": "org", "id": org_id},
        "status": "completed",
        "platform": "orchA",
        "templateId": "t1",
        "templateName": "Team",
    }


async def test_every_action_is_recorded_with_its_actor(make_client):
    client = await make_client(rate_limit_multiplier=None)
    w = await world(client)
    await make_pro(client, w.org["id"])
    extra = await join(client, w.admin, w.slug)  # member.invited (by the admin), member.joined
    await ok(await send(client, w.owner, "PATCH", f"{w.base}/members/{extra.id}/role", {"role": "admin"}))
    await ok(await send(client, w.owner, "DELETE", f"{w.base}/members/{extra.id}"))
    for value in ("a", "b"):
        await ok(await send(client, w.admin, "POST", f"{w.base}/secrets", {"key": "TOKEN", "value": value}))
    assert (await send(client, w.admin, "DELETE", f"{w.base}/secrets/TOKEN")).status == 204
    for enabled in (True, False):
        await ok(await send(client, w.owner, "PATCH", f"{w.base}/settings/governance", {"enabled": enabled}))
    store = app_store(client)
    await store.installs.insert_many([seed_install(w.org["id"], "i1"), seed_install(w.org["id"], "i2")])
    ids = []
    for install_id in ("i1", "i2"):
        body = {"installId": install_id, "templateId": "t1", "templateName": "Team"}
        ids.append(
            (await ok(await send(client, w.member, "POST", f"{w.base}/approvals", body)))["approval"]["id"]
        )
    await ok(await send(client, w.admin, "PATCH", f"{w.base}/approvals/{ids[0]}", {"status": "approved"}))
    await ok(await send(client, w.admin, "PATCH", f"{w.base}/approvals/{ids[1]}", {"status": "rejected"}))
    transfer = {"newOwnerId": w.admin.id, "confirmation": w.org["name"]}
    await ok(await send(client, w.owner, "PATCH", f"{w.base}/transfer", transfer))

    events = (await ok(await send(client, w.admin, "GET", f"{w.base}/audit-log?limit=100")))["events"]
    assert set(events[0]) == {"id", "actorId", "actorEmail", "action", "meta", "createdAt"}
    stamps = [e["createdAt"] for e in events]
    assert stamps == sorted(stamps, reverse=True), "newest first"
    by_action: dict[str, list[dict]] = {}
    for event in reversed(events):
        by_action.setdefault(event["action"], []).append(event)

    def actor(action: str, index: int = 0) -> tuple[str | None, str | None]:
        event = by_action[action][index]
        return event["actorId"], event["actorEmail"]

    assert actor("member.invited", 2) == (w.admin.id, w.admin.email)
    assert by_action["member.invited"][2]["meta"] == {"email": extra.email, "role": "member"}
    assert actor("member.joined", 2) == (extra.id, extra.email)
    assert actor("member.role_changed") == (w.owner.id, w.owner.email)
    assert by_action["member.role_changed"][0]["meta"] == {
        "userId": extra.id,
        "from": "member",
        "to": "admin",
    }
    assert actor("member.removed") == (w.owner.id, w.owner.email)
    assert [
        e["action"]
        for e in by_action["secret.created"] + by_action["secret.updated"] + by_action["secret.deleted"]
    ] == [
        "secret.created",
        "secret.updated",
        "secret.deleted",
    ]
    assert actor("secret.updated") == (w.admin.id, w.admin.email)
    assert actor("governance.enabled") == actor("governance.disabled") == (w.owner.id, w.owner.email)
    assert [actor("approval.requested", i) for i in (0, 1)] == [(w.member.id, w.member.email)] * 2
    assert actor("approval.approved") == actor("approval.rejected") == (w.admin.id, w.admin.email)
    assert by_action["approval.approved"][0]["meta"]["installId"] == "i1"
    assert actor("org.transferred") == (w.owner.id, w.owner.email)
    assert by_action["org.transferred"][0]["meta"]["toUserId"] == w.admin.id
    assert by_action["billing.subscription_updated"][0]["meta"]["plan"] == "pro"
    assert by_action["billing.subscription_updated"][0]["actorId"] is None


async def test_paging_limits_and_windows(make_client):
    client = await make_client(rate_limit_multiplier=None)
    w = await world(client, pro=True)
    for i in range(12):
        await invite(client, w.owner, w.slug, f"p{i}@example.com")
    path = f"{w.base}/audit-log"
    everything = (await ok(await send(client, w.owner, "GET", f"{path}?limit=100")))["events"]
    total = len(everything)
    assert total >= 12 + 5  # 12 invitations; creation, two invitations and joins; the plan
    default = await ok(await send(client, w.owner, "GET", path))
    assert (default["page"], default["limit"], len(default["events"])) == (1, 50, total)
    pages = []
    for page in (1, 2, 3, 4, 5):
        body = await ok(await send(client, w.owner, "GET", f"{path}?page={page}&limit=5"))
        assert (body["page"], body["limit"]) == (page, 5)
        pages.extend(body["events"])
    assert [e["id"] for e in pages] == [e["id"] for e in everything][:25]
    for bad in ("limit=0", "limit=101", "limit=abc", "page=0", "page=-1", "from=yesterday", "to=2024-13-01"):
        response = await send(client, w.owner, "GET", f"{path}?{bad}")
        assert response.status == 400, bad
        assert set(await response.json()) == {"error"}
    later = iso(utcnow() + timedelta(hours=1))
    earlier = iso(utcnow() - timedelta(hours=1))
    assert (await send(client, w.owner, "GET", f"{path}?from={later}&to={earlier}")).status == 400
    assert (await ok(await send(client, w.owner, "GET", f"{path}?from={later}")))["events"] == []
    assert (
        len((await ok(await send(client, w.owner, "GET", f"{path}?from={earlier}&limit=100")))["events"])
        == total
    )
    assert (await ok(await send(client, w.owner, "GET", f"{path}?to={earlier}")))["events"] == []
    # Members may not read it.
    assert (await send(client, w.member, "GET", path)).status == 403


async def test_no_route_changes_audit_events(make_client):
    client = await make_client()
    routes = client.server.app[ROUTE_TABLE]
    audit_routes = sorted((r.method, r.path) for r in routes if "audit" in r.path)
    assert audit_routes == [
        ("GET", "/api/installs/{id}/audit"),
        ("GET", "/api/orgs/{slug}/audit-log"),
        ("GET", "/api/orgs/{slug}/audit/timeline"),
    ], "the audit log and the timelines are read-only"
