"""Caps and multi-step changes under racing requests: one atomic step, or nothing changes."""

from __future__ import annotations

import asyncio

from svc.core import credential_digest, new_api_key, new_id, utcnow
from svc.orgs.access import MAX_LISTED
from svc.orgs.org_keys import MAX_ORG_KEYS
from tests.support.accounts import app_store
from tests.support.orgs import send, world

RACERS = 8


async def test_racing_org_key_creates_cannot_pass_the_cap(client):
    team = await world(client, pro=True)
    store = app_store(client)
    now = utcnow()
    await store.api_keys.insert_many(
        [
            {
                "_id": new_id(),
                "keyHash": credential_digest(new_api_key()),
                "userId": None,
                "orgId": team.org["id"],
                "label": f"old-{i}",
                "installId": None,
                "createdBy": team.owner.id,
                "createdAt": now,
            }
            for i in range(MAX_ORG_KEYS - 2)
        ]
    )
    answers = await asyncio.gather(
        *(send(client, team.owner, "POST", f"{team.base}/keys", {"label": f"new-{i}"}) for i in range(RACERS))
    )
    statuses = sorted(response.status for response in answers)
    assert statuses == [200, 200] + [409] * (RACERS - 2)
    assert await store.api_keys.count_documents({"orgId": team.org["id"]}) == MAX_ORG_KEYS

    # Revoking one frees exactly one slot.
    listed = await (await send(client, team.owner, "GET", f"{team.base}/keys")).json()
    key_id = listed["keys"][0]["id"]
    assert (await send(client, team.owner, "DELETE", f"{team.base}/keys/{key_id}")).status == 204
    answers = await asyncio.gather(
        *(send(client, team.owner, "POST", f"{team.base}/keys", {"label": f"again-{i}"}) for i in range(3))
    )
    assert sorted(response.status for response in answers) == [200, 409, 409]


async def test_racing_org_secret_creates_cannot_pass_the_cap(client):
    team = await world(client, pro=True)
    store = app_store(client)
    now = utcnow()
    await store["org_secrets"].insert_many(
        [
            {
                "_id": new_id(),
                "orgId": team.org["id"],
                "key": f"OLD_{i}",
                "valueEncrypted": "x",
                "createdAt": now,
                "updatedAt": now,
            }
            for i in range(MAX_LISTED - 2)
        ]
    )
    answers = await asyncio.gather(
        *(
            send(client, team.owner, "POST", f"{team.base}/secrets", {"key": f"NEW_{i}", "value": "v"})
            for i in range(RACERS)
        )
    )
    statuses = sorted(response.status for response in answers)
    assert statuses == [200, 200] + [409] * (RACERS - 2)
    assert await store["org_secrets"].count_documents({"orgId": team.org["id"]}) == MAX_LISTED
    # Updating a held name needs no slot; deleting one frees one.
    assert (
        await send(client, team.owner, "POST", f"{team.base}/secrets", {"key": "OLD_1", "value": "w"})
    ).status == 200
    assert (await send(client, team.owner, "DELETE", f"{team.base}/secrets/OLD_1")).status == 204
    answers = await asyncio.gather(
        *(
            send(client, team.owner, "POST", f"{team.base}/secrets", {"key": f"LAST_{i}", "value": "v"})
            for i in range(3)
        )
    )
    assert sorted(response.status for response in answers) == [200, 409, 409]


async def owners_of(client, team) -> tuple[list[str], str]:
    """The members with role owner, and the org's ownerId."""
    store = app_store(client)
    members = await store.org_members.find({"orgId": team.org["id"], "role": "owner"}).to_list(None)
    org = await store.orgs.find_one({"_id": team.org["id"]})
    return sorted(m["userId"] for m in members), org["ownerId"]


async def test_racing_transfers_leave_exactly_one_owner(client):
    for _ in range(3):
        team = await world(client)
        body = {"confirmation": team.org["name"]}
        path = f"{team.base}/transfer"
        answers = await asyncio.gather(
            send(client, team.owner, "PATCH", path, {**body, "newOwnerId": team.admin.id}),
            send(client, team.owner, "PATCH", path, {**body, "newOwnerId": team.member.id}),
        )
        statuses = sorted(response.status for response in answers)
        assert statuses[0] == 200 and statuses[1] in (200, 403, 409), statuses
        owners, owner_id = await owners_of(client, team)
        assert owners == [owner_id], (owners, owner_id)


async def test_a_target_leaving_mid_transfer_leaves_the_org_owned(client):
    for _ in range(3):
        team = await world(client)
        body = {"confirmation": team.org["name"], "newOwnerId": team.member.id}
        await asyncio.gather(
            send(client, team.member, "DELETE", f"{team.base}/members/{team.member.id}"),
            send(client, team.owner, "PATCH", f"{team.base}/transfer", body),
        )
        owners, owner_id = await owners_of(client, team)
        assert owners == [owner_id], (owners, owner_id)
        member = await app_store(client).org_members.find_one({"orgId": team.org["id"], "userId": owner_id})
        assert member is not None
