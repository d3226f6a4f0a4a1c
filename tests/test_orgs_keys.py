"""Org keys: shown once, stored by hash, revoked at once; what they (and members' keys) may manage."""

from __future__ import annotations

from svc.core import credential_digest, is_api_key
from tests.support.accounts import app_store, bearer, create_key
from tests.support.installs import list_installs, managed_install, mine, published_team
from tests.support.orgs import ok, org_key, send, world
from tests.support.templates import create_template, get_template, patch


async def test_org_keys_are_shown_once_and_stored_as_a_hash(make_client):
    client = await make_client(rate_limit_multiplier=None)
    w = await world(client)
    created = await ok(await send(client, w.admin, "POST", f"{w.base}/keys", {"label": "deploy bot"}))
    assert set(created) == {"id", "key", "label", "createdAt"}
    assert is_api_key(created["key"]) and created["label"] == "deploy bot"
    listed = (await ok(await send(client, w.member, "GET", f"{w.base}/keys")))["keys"]
    assert listed == [{"id": created["id"], "label": "deploy bot", "createdAt": created["createdAt"]}]
    stored = await app_store(client).api_keys.find_one({"_id": created["id"]})
    assert stored["keyHash"] == credential_digest(created["key"]) and stored["orgId"] == w.org["id"]
    assert created["key"] not in str(stored) and "keyEncrypted" not in stored
    # The member's personal key list does not show org keys.
    personal = await ok(await send(client, w.member, "GET", "/api/auth/keys"))
    assert personal["keys"] == []


async def test_key_identity_of_an_org_key_names_the_org(make_client):
    client = await make_client(rate_limit_multiplier=None)
    w = await world(client)
    key = await org_key(client, w.owner, w.slug)
    body = await ok(await client.get("/api/auth/key-identity", headers=bearer(key)))
    assert body == {"userName": None, "orgName": w.org["name"], "orgSlug": w.slug}
    member_key = await create_key(client, w.member)
    body = await ok(await client.get("/api/auth/key-identity", headers=bearer(member_key)))
    assert body == {"userName": "Mia Member", "orgName": w.org["name"], "orgSlug": w.slug}


async def test_a_revoked_org_key_is_refused_on_the_next_request(make_client):
    client = await make_client(rate_limit_multiplier=None)
    w = await world(client)
    created = await ok(await send(client, w.owner, "POST", f"{w.base}/keys", {}))
    headers = bearer(created["key"])
    assert (await client.get("/api/installs", headers=headers)).status == 200  # now cached
    assert (await send(client, w.admin, "DELETE", f"{w.base}/keys/{created['id']}")).status == 204
    refused = await client.get("/api/installs", headers=headers)
    assert refused.status == 401 and await refused.json() == {"error": "Invalid API key"}
    assert (await send(client, w.admin, "DELETE", f"{w.base}/keys/{created['id']}")).status == 404
    assert (await ok(await send(client, w.owner, "GET", f"{w.base}/keys")))["keys"] == []


async def test_keys_of_one_org_cannot_be_revoked_through_another(make_client):
    client = await make_client(rate_limit_multiplier=None)
    first = await world(client)
    second = await world(client)
    created = await ok(await send(client, first.owner, "POST", f"{first.base}/keys", {}))
    response = await send(client, second.owner, "DELETE", f"{second.base}/keys/{created['id']}")
    assert response.status == 404
    assert (await client.get("/api/installs", headers=bearer(created["key"]))).status == 200


async def test_org_key_manages_org_templates_and_a_members_key_only_their_own(make_client):
    client = await make_client(rate_limit_multiplier=None)
    w = await world(client)
    key_one = await org_key(client, w.owner, w.slug, "one")
    key_two = await org_key(client, w.admin, w.slug, "two")
    member_key = await create_key(client, w.member)

    org_draft = await create_template(client, key_one, name="Org Draft")
    stored = await app_store(client)["templates"].find_one({"_id": org_draft["id"]})
    assert stored["owner"] == {"kind": "org", "id": w.org["id"]}
    # Any key of the org manages it.
    assert (await patch(client, key_two, org_draft["id"], name="Org Draft 2")).status == 200
    # A member's personal key does not.
    assert (await get_template(client, org_draft["id"], member_key)).status == 404
    assert (await patch(client, member_key, org_draft["id"], name="hijack")).status == 404

    own = await create_template(client, member_key, name="Mine")
    stored = await app_store(client)["templates"].find_one({"_id": own["id"]})
    assert stored["owner"] == {"kind": "user", "id": w.member.id}
    assert (await patch(client, member_key, own["id"], name="Mine 2")).status == 200
    assert (await patch(client, key_one, own["id"], name="taken")).status == 404

    # Another org's key reaches nothing of this org.
    other = await world(client)
    other_key = await org_key(client, other.owner, other.slug)
    assert (await patch(client, other_key, org_draft["id"], name="x")).status == 404


async def test_org_installs_are_reached_by_org_keys_only(make_client):
    client = await make_client(rate_limit_multiplier=None)
    w = await world(client)
    key = await org_key(client, w.owner, w.slug)
    template = await published_team(client, key, name="Org Pipeline")
    install_id = (await managed_install(client, key, template["id"], company="Acme"))["installId"]
    # The org key stays unscoped: it still manages templates and sees the install.
    assert (await create_template(client, key, name="After install"))["name"] == "After install"
    assert [i["id"] for i in await list_installs(client, key)] == [install_id]
    variables = await client.patch(
        f"/api/installs/{install_id}/variables", json={"tone": "dry"}, headers=bearer(key)
    )
    assert variables.status == 200
    events = await client.get(f"/api/installs/{install_id}/events", headers=bearer(key))
    assert events.status == 200

    # A member's personal key (and another org's key) gets 404 on every install route.
    member_key = await create_key(client, w.member)
    other = await world(client)
    outsider_key = await org_key(client, other.owner, other.slug)
    for foreign in (member_key, outsider_key):
        assert await list_installs(client, foreign) == []
        for method, path in (
            ("PATCH", f"/api/installs/{install_id}/variables"),
            ("GET", f"/api/installs/{install_id}/events"),
            ("DELETE", f"/api/installs/{install_id}"),
        ):
            response = await client.request(method, path, json={"tone": "x"}, headers=bearer(foreign))
            assert response.status == 404, (method, path)
    # The dashboard (a member's session) reaches it through K/S routes, as /installs/mine lists it;
    # another org's member does not.
    assert (await send(client, w.member, "GET", f"/api/installs/{install_id}/events")).status == 200
    assert (await send(client, other.member, "GET", f"/api/installs/{install_id}/events")).status == 404
    assert (await send(client, w.outsider, "GET", f"/api/installs/{install_id}/events")).status == 404

    # Managed installs: members see it with the org's name and slug; outsiders do not.
    for caller in (w.member, w.admin, w.owner):
        (item,) = [i for i in await mine(client, caller) if i["id"] == install_id]
        assert (item["name"], item["orgSlug"], item["pipelineName"]) == (
            w.org["name"],
            w.slug,
            "Org Pipeline",
        )
    assert await mine(client, w.outsider) == []


async def test_a_member_who_left_reaches_no_org_install(make_client):
    client = await make_client(rate_limit_multiplier=None)
    w = await world(client)
    key = await org_key(client, w.owner, w.slug)
    template = await published_team(client, key, name="Left Behind")
    install_id = (await managed_install(client, key, template["id"], company="Acme"))["installId"]
    path = f"/api/installs/{install_id}/events"
    assert (await send(client, w.member, "GET", path)).status == 200
    await ok(await send(client, w.member, "DELETE", f"{w.base}/members/{w.member.id}"))
    assert (await send(client, w.member, "GET", path)).status == 404
    assert install_id not in [i["id"] for i in await mine(client, w.member)]
