"""Orgs, members, roles, transfer and invitations over HTTP (spec "Organisations", "Invitation")."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from svc.core.clock import utcnow
from tests.fakes.smtp import SmtpSink
from tests.support.accounts import app_store, signup
from tests.support.orgs import create_org, invitation_token, invite, join, last_mail, ok, org_key, send, world
from tests.support.templates import create_template, user_with_key


@pytest.fixture
async def sink():
    server = await SmtpSink().start()
    yield server
    await server.stop()


async def test_create_derives_a_unique_url_safe_slug(make_client):
    client = await make_client(rate_limit_multiplier=None)
    owner = await signup(client)
    first = await create_org(client, owner, "Acme Robotics, Inc.!")
    second = await create_org(client, owner, "acme robotics inc")
    third = await create_org(client, owner, "ÄCME   robotics -- inc")
    assert (first["slug"], second["slug"], third["slug"]) == (
        "acme-robotics-inc",
        "acme-robotics-inc-2",
        "acme-robotics-inc-3",
    )
    assert (await create_org(client, owner, "Mine"))["slug"] == "mine-org", "never shadows /api/orgs/mine"
    assert (await create_org(client, owner, "!!!"))["slug"] == "org"
    assert first["plan"] == "free" and first["governanceEnabled"] is False
    assert set(first) == {
        "id",
        "name",
        "slug",
        "plan",
        "billingEmail",
        "avatarUrl",
        "governanceEnabled",
        "currentPeriodEnd",
        "cancelAtPeriodEnd",
        "createdAt",
    }
    mine = await ok(await send(client, owner, "GET", "/api/orgs/mine"))
    assert [item["role"] for item in mine["orgs"]] == ["owner"] * 5
    assert mine["orgs"][0]["org"]["slug"] == "acme-robotics-inc"


async def test_create_ignores_fields_it_does_not_take(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    owner = await signup(client)
    body = {"name": "Sneaky", "plan": "pro", "slug": "admin", "governanceEnabled": True, "ownerId": "x"}
    org = (await ok(await send(client, owner, "POST", "/api/orgs", body)))["org"]
    assert (org["plan"], org["slug"], org["governanceEnabled"]) == ("free", "sneaky", False)
    assert (await store.orgs.find_one({"_id": org["id"]}))["ownerId"] == owner.id
    for bad in ({}, {"name": ""}, {"name": "   "}, {"name": 5}, {"name": "x" * 101}):
        response = await send(client, owner, "POST", "/api/orgs", bad)
        assert response.status == 400, bad


async def test_get_org_shows_counts_role_and_the_orgs_recent_templates(make_client):
    client = await make_client(rate_limit_multiplier=None)
    w = await world(client)
    key = await org_key(client, w.owner, w.slug)
    names = [f"Org Team {i}" for i in range(7)]
    for name in names:
        await create_template(client, key, name=name)
    _, personal = await user_with_key(client)
    await create_template(client, personal, name="Somebody else's")
    body = await ok(await send(client, w.member, "GET", w.base))
    assert body["memberCount"] == 3 and body["myRole"] == "member"
    assert body["org"]["slug"] == w.slug
    assert [t["name"] for t in body["recentTemplates"]] == names[::-1][:5]
    assert (await ok(await send(client, w.admin, "GET", w.base)))["myRole"] == "admin"


async def test_update_org(make_client):
    client = await make_client(rate_limit_multiplier=None)
    w = await world(client)
    body = {"name": "Renamed", "billingEmail": "Billing@Example.com", "avatarUrl": "https://x.example/a.png"}
    org = (await ok(await send(client, w.admin, "PATCH", w.base, body)))["org"]
    assert (org["name"], org["billingEmail"], org["avatarUrl"]) == (
        "Renamed",
        "billing@example.com",
        "https://x.example/a.png",
    )
    assert org["slug"] == w.slug, "the slug is stable across renames"
    for bad in ({"avatarUrl": "javascript:alert(1)"}, {"billingEmail": "not-an-email"}, {"name": ""}):
        assert (await send(client, w.owner, "PATCH", w.base, bad)).status == 400, bad


async def test_members_list_and_roles(make_client):
    client = await make_client(rate_limit_multiplier=None)
    w = await world(client)
    members = (await ok(await send(client, w.member, "GET", f"{w.base}/members")))["members"]
    assert [(m["role"], m["userId"]) for m in members] == [
        ("owner", w.owner.id),
        ("admin", w.admin.id),
        ("member", w.member.id),
    ]
    assert members[0]["email"] == w.owner.email and members[0]["name"] == "Olive Owner"
    assert set(members[0]) == {
        "memberId",
        "role",
        "joinedAt",
        "userId",
        "name",
        "handle",
        "email",
        "avatarUrl",
    }

    role = f"{w.base}/members/{w.member.id}/role"
    for bad in ("owner", "superuser", ""):
        response = await send(client, w.owner, "PATCH", role, {"role": bad})
        assert response.status == 400, bad
    await ok(await send(client, w.admin, "PATCH", role, {"role": "admin"}))
    owner_role = await send(
        client, w.admin, "PATCH", f"{w.base}/members/{w.owner.id}/role", {"role": "member"}
    )
    assert owner_role.status == 409 and "owner" in (await owner_role.json())["error"]
    stranger = await send(
        client, w.owner, "PATCH", f"{w.base}/members/{w.outsider.id}/role", {"role": "admin"}
    )
    assert stranger.status == 404
    members = (await ok(await send(client, w.member, "GET", f"{w.base}/members")))["members"]
    assert [m["role"] for m in members] == ["owner", "admin", "admin"]


async def test_the_owner_cannot_be_removed_or_leave(make_client):
    client = await make_client(rate_limit_multiplier=None)
    w = await world(client)
    by_admin = await send(client, w.admin, "DELETE", f"{w.base}/members/{w.owner.id}")
    assert by_admin.status == 409 and await by_admin.json() == {"error": "The owner cannot be removed"}
    leave = await send(client, w.owner, "DELETE", f"{w.base}/members/{w.owner.id}")
    assert leave.status == 409
    assert "transfer ownership first" in (await leave.json())["error"]
    # A member leaves; an admin removes another member.
    await ok(await send(client, w.member, "DELETE", f"{w.base}/members/{w.member.id}"))
    assert (await send(client, w.member, "GET", w.base)).status == 404
    other = await join(client, w.owner, w.slug)
    await ok(await send(client, w.admin, "DELETE", f"{w.base}/members/{other.id}"))
    assert (await send(client, other, "GET", w.base)).status == 404
    # A member cannot remove anybody else.
    third = await join(client, w.owner, w.slug)
    fourth = await join(client, w.owner, w.slug)
    assert (await send(client, third, "DELETE", f"{w.base}/members/{fourth.id}")).status == 403


async def test_transfer(make_client):
    client = await make_client(rate_limit_multiplier=None)
    w = await world(client)
    path = f"{w.base}/transfer"
    name = w.org["name"]
    mismatch = await send(
        client, w.owner, "PATCH", path, {"newOwnerId": w.admin.id, "confirmation": name.lower()}
    )
    assert mismatch.status == 400
    assert await mismatch.json() == {"error": "Confirmation must match the org name exactly"}
    stranger = await send(client, w.owner, "PATCH", path, {"newOwnerId": w.outsider.id, "confirmation": name})
    assert stranger.status == 404 and await stranger.json() == {"error": "Target user is not a member"}
    assert (await send(client, w.owner, "PATCH", path, {"confirmation": name})).status == 400
    await ok(await send(client, w.owner, "PATCH", path, {"newOwnerId": w.member.id, "confirmation": name}))
    roles = {
        m["userId"]: m["role"]
        for m in (await ok(await send(client, w.owner, "GET", f"{w.base}/members")))["members"]
    }
    assert roles == {w.owner.id: "member", w.member.id: "owner", w.admin.id: "admin"}
    assert (await send(client, w.owner, "DELETE", w.base)).status == 403, "the old owner is a member now"
    assert (await ok(await send(client, w.member, "GET", w.base)))["myRole"] == "owner"


async def test_invitation_flow(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    w = await world(client)
    invitee = await signup(client, email="Invitee@Example.com")
    first = await invite(client, w.admin, w.slug, "invitee@example.com", "admin")
    assert first["email"] == "invitee@example.com" and first["role"] == "admin"
    expires = first["expiresAt"]
    assert abs((utcnow() + timedelta(days=7)).timestamp() - _ts(expires)) < 60
    mail = await last_mail(client, "invitee@example.com", "org_invitation")
    old_token = await invitation_token(client, "invitee@example.com")
    assert f"http://127.0.0.1:8080/invitations/{old_token}" in mail["body"]
    assert w.org["name"] in mail["subject"]
    # Only a hash of the token is stored.
    stored = await app_store(client)["org_invitations"].find_one({"orgId": w.org["id"]})
    assert old_token not in str(stored)

    # A second invitation to the same email replaces the token.
    await invite(client, w.owner, w.slug, "INVITEE@example.com", "admin")
    new_token = await invitation_token(client, "invitee@example.com")
    assert new_token != old_token
    listed = (await ok(await send(client, w.owner, "GET", f"{w.base}/invitations")))["invitations"]
    assert [i["email"] for i in listed] == ["invitee@example.com"]
    assert (await send(client, invitee, "POST", f"/api/invitations/{old_token}/accept")).status == 404

    # Somebody else signed in cannot use it.
    wrong = await send(client, w.outsider, "POST", f"/api/invitations/{new_token}/accept")
    assert wrong.status == 403
    joined = await ok(await send(client, invitee, "POST", f"/api/invitations/{new_token}/accept"))
    assert joined["role"] == "admin" and joined["org"]["slug"] == w.slug
    assert (await ok(await send(client, invitee, "GET", w.base)))["myRole"] == "admin"
    assert (await send(client, invitee, "POST", f"/api/invitations/{new_token}/accept")).status == 404
    assert (await ok(await send(client, w.owner, "GET", f"{w.base}/invitations")))["invitations"] == []
    # Inviting an existing member is a conflict; a bad role is 400.
    again = await send(
        client, w.owner, "POST", f"{w.base}/invitations", {"email": invitee.email, "role": "member"}
    )
    assert again.status == 409
    for role in ("owner", "root"):
        body = {"email": "z@example.com", "role": role}
        assert (await send(client, w.owner, "POST", f"{w.base}/invitations", body)).status == 400


async def test_expired_and_cancelled_invitations(make_client):
    client = await make_client(rate_limit_multiplier=None)
    w = await world(client)
    late = await signup(client)
    invitation = await invite(client, w.owner, w.slug, late.email)
    token = await invitation_token(client, late.email)
    # Time passes: the test moves the invitation's expiry into the past in the database.
    await app_store(client)["org_invitations"].update_one(
        {"_id": invitation["id"]}, {"$set": {"expiresAt": utcnow() - timedelta(seconds=1)}}
    )
    expired = await send(client, late, "POST", f"/api/invitations/{token}/accept")
    assert expired.status == 410 and "expired" in (await expired.json())["error"]
    assert (await ok(await send(client, w.owner, "GET", f"{w.base}/invitations")))["invitations"] == []
    assert (await send(client, late, "GET", w.base)).status == 404

    # A fresh invitation works again; a cancelled one does not.
    fresh = await invite(client, w.owner, w.slug, late.email)
    token = await invitation_token(client, late.email)
    assert (await send(client, w.admin, "DELETE", f"{w.base}/invitations/{fresh['id']}")).status == 200
    assert (await send(client, w.admin, "DELETE", f"{w.base}/invitations/{fresh['id']}")).status == 404
    assert (await send(client, late, "POST", f"/api/invitations/{token}/accept")).status == 404
    assert (await send(client, late, "POST", "/api/invitations/not-a-token/accept")).status == 404


async def test_invitation_mail_goes_over_smtp_when_configured(make_client, sink):
    client = await make_client(rate_limit_multiplier=None, smtp_url=f"smtp://127.0.0.1:{sink.port}")
    owner = await signup(client)
    org = await create_org(client, owner, "Mail Org")
    await invite(client, owner, org["slug"], "friend@example.com")
    assert sink.recipients == [["friend@example.com"]]
    assert "/invitations/" in sink.messages[0].get_payload()
    assert (await last_mail(client, "friend@example.com", "org_invitation"))["status"] == "sent"


def _ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
