"""Deleting an org, plans and the billing status, and the operator's `svc orgs set-plan`."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import timedelta

from api.context import SERVICES
from svc.core.clock import utcnow
from svc.core.store import Store
from tests.support.accounts import app_store, bearer, create_key, signup
from tests.support.installs import list_installs, managed_install, published_team
from tests.support.orgs import (
    audit_actions,
    create_org,
    invite,
    join,
    make_pro,
    ok,
    org_key,
    send,
    world,
)
from tests.support.templates import create_template, patch


async def test_delete_reverts_templates_and_removes_everything_reachable(make_client):
    client = await make_client(rate_limit_multiplier=None)
    w = await world(client, pro=True)
    org_id = w.org["id"]
    key = await org_key(client, w.owner, w.slug)
    assert (await client.get("/api/installs", headers=bearer(key))).status == 200  # cached
    draft = await create_template(client, key, name="Org Draft")
    template = await published_team(client, key, name="Org Team")
    install_id = (await managed_install(client, key, template["id"]))["installId"]
    await ok(await send(client, w.owner, "POST", f"{w.base}/secrets", {"key": "TOKEN", "value": "v"}))
    await invite(client, w.owner, w.slug, "pending@example.com")

    # Only the owner may delete, and not while the subscription still charges.
    assert (await send(client, w.admin, "DELETE", w.base)).status == 403
    assert (await send(client, w.owner, "DELETE", w.base)).status == 409
    store = app_store(client)
    # (What billing/cancel records: the provider ends the subscription at the period's end.)
    await store.orgs.update_one({"_id": org_id}, {"$set": {"cancelAtPeriodEnd": True}})
    assert await ok(await send(client, w.owner, "DELETE", w.base)) == {"ok": True}

    # The org key is refused at once (the cache was evicted).
    assert (await client.get("/api/installs", headers=bearer(key))).status == 401
    assert await store.api_keys.count_documents({"orgId": org_id}) == 0
    # Templates and installs belong to the owner now.
    for template_id in (draft["id"], template["id"]):
        doc = await store["templates"].find_one({"_id": template_id})
        assert doc["owner"] == {"kind": "user", "id": w.owner.id}
    install = await store.installs.find_one({"_id": install_id})
    assert install["owner"] == {"kind": "user", "id": w.owner.id}
    owner_key = await create_key(client, w.owner)
    assert (await patch(client, owner_key, draft["id"], name="Mine now")).status == 200
    assert [i["id"] for i in await list_installs(client, owner_key)] == [install_id]
    # Members, invitations and secrets are gone; the audit log stays.
    assert await store.org_members.count_documents({"orgId": org_id}) == 0
    assert await store["org_invitations"].count_documents({"orgId": org_id}) == 0
    assert await store["org_secrets"].count_documents({"orgId": org_id}) == 0
    assert await store.orgs.count_documents({"_id": org_id}) == 0
    assert "org.deleted" in [e["action"] for e in await audit_actions(client, org_id)]
    for caller in (w.owner, w.admin, w.member):
        assert (await send(client, caller, "GET", w.base)).status == 404
        assert (await ok(await send(client, caller, "GET", "/api/orgs/mine")))["orgs"] == []
    # The slug is free again.
    assert (await create_org(client, w.owner, w.org["name"]))["slug"] == w.slug


async def test_delete_hands_each_install_to_its_deployer_while_still_a_member(make_client):
    """Issue #23: an install goes back to the member who deployed it; a former member's goes to
    the owner (removing the hand-back loop in `Removal.hand_back` makes this fail)."""
    client = await make_client(rate_limit_multiplier=None)
    w = await world(client)
    leaver = await join(client, w.owner, w.slug, "admin", name="Lee Leaver")
    template = await published_team(client, await create_key(client, w.owner), name="Shared Team")
    # An install made with an org key is deployed by the member who created the key (docs/orgs.md).
    stays = await managed_install(client, await org_key(client, w.admin, w.slug), template["id"])
    gone = await managed_install(client, await org_key(client, leaver, w.slug), template["id"])
    store = app_store(client)
    deployers = {doc["_id"]: doc["deployedBy"] async for doc in store.installs.find({})}
    assert deployers == {stays["installId"]: w.admin.id, gone["installId"]: leaver.id}
    await ok(await send(client, leaver, "DELETE", f"{w.base}/members/{leaver.id}"))

    assert await ok(await send(client, w.owner, "DELETE", w.base)) == {"ok": True}
    owners = {
        doc["_id"]: doc["owner"]
        async for doc in store.installs.find({"_id": {"$in": [stays["installId"], gone["installId"]]}})
    }
    assert owners == {
        stays["installId"]: {"kind": "user", "id": w.admin.id},
        gone["installId"]: {"kind": "user", "id": w.owner.id},
    }


async def test_an_org_marked_deleting_is_unreachable(make_client):
    """A crash after the first write of a delete leaves the org invisible (docs/orgs.md)."""
    client = await make_client(rate_limit_multiplier=None)
    w = await world(client)
    await app_store(client).orgs.update_one({"_id": w.org["id"]}, {"$set": {"deleting": True}})
    assert (await send(client, w.owner, "GET", w.base)).status == 404
    assert (await ok(await send(client, w.member, "GET", "/api/orgs/mine")))["orgs"] == []


async def test_apply_subscription_derives_the_plan_and_is_audited(make_client):
    client = await make_client(rate_limit_multiplier=None)
    w = await world(client)
    status = await ok(await send(client, w.member, "GET", f"{w.base}/billing/status"))
    assert status == {
        "plan": "free",
        "subscriptionStatus": None,
        "trialEndsAt": None,
        "trialDaysLeft": None,
        "hasCustomer": False,
        "planUpdatedAt": None,
        "isPro": False,
        "isTrialing": False,
    }
    service = client.server.app[SERVICES].org_plans
    trial_end = utcnow() + timedelta(days=14)
    await service.apply_subscription(
        w.org["id"],
        status="trialing",
        trial_end=trial_end,
        current_period_end=trial_end,
        cancel_at_period_end=False,
        customer_id="cus_1",
        subscription_id="sub_1",
    )
    status = await ok(await send(client, w.member, "GET", f"{w.base}/billing/status"))
    assert (status["plan"], status["isPro"], status["isTrialing"], status["hasCustomer"]) == (
        "pro",
        True,
        True,
        True,
    )
    assert status["trialDaysLeft"] == 14 and status["planUpdatedAt"]
    stored = await app_store(client).orgs.find_one({"_id": w.org["id"]})
    assert (stored["payCustomerId"], stored["paySubscriptionId"]) == ("cus_1", "sub_1")

    for sub_status, plan in (("active", "pro"), ("past_due", "free"), ("cancelled", "free"), (None, "free")):
        org = await service.apply_subscription(
            w.org["id"],
            status=sub_status,
            trial_end=None,
            current_period_end=None,
            cancel_at_period_end=sub_status == "active",
            customer_id=None,
            subscription_id=None,
        )
        assert org["plan"] == plan, sub_status
    stored = await app_store(client).orgs.find_one({"_id": w.org["id"]})
    assert stored["payCustomerId"] == "cus_1", "None keeps the stored customer"
    events = [
        e for e in await audit_actions(client, w.org["id"]) if e["action"] == "billing.subscription_updated"
    ]
    assert [e["meta"]["plan"] for e in events] == ["pro", "pro", "free", "free", "free"]
    assert events[0]["actorId"] is None and events[0]["meta"]["source"] == "payment_provider"


def test_operator_sets_the_plan_from_the_shell(db_uri, tmp_path, secret_key):
    async def seed() -> None:
        store = Store.connect(db_uri)
        now = utcnow()
        await store.orgs.insert_one(
            {"_id": "o1", "name": "Shell Org", "slug": "shell-org", "plan": "free", "createdAt": now}
        )
        await store.close()

    async def read() -> tuple[dict, list]:
        store = Store.connect(db_uri)
        org = await store.orgs.find_one({"_id": "o1"})
        events = await store["org_audit"].find({"orgId": "o1"}).to_list(None)
        await store.client.drop_database(store.db.name)
        await store.close()
        return org, events

    asyncio.run(seed())
    env = {
        **os.environ,
        "SVC_MONGODB_URI": db_uri,
        "SVC_SECRET_KEYS": secret_key,
        "SVC_DATA_DIR": str(tmp_path),
    }
    cli = [sys.executable, "-m", "api.cli"]
    done = subprocess.run(
        [*cli, "orgs", "set-plan", "shell-org", "pro"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["plan"] == "pro"
    missing = subprocess.run(
        [*cli, "orgs", "set-plan", "nope", "pro"], env=env, capture_output=True, text=True, timeout=120
    )
    assert missing.returncode == 1 and "Org not found" in missing.stderr
    org, events = asyncio.run(read())
    assert (org["plan"], org["subscriptionStatus"]) == ("pro", "active")
    assert [(e["action"], e["meta"]["source"]) for e in events] == [
        ("billing.subscription_updated", "operator")
    ]


async def test_free_orgs_get_402_with_a_clear_error(make_client):
    client = await make_client(rate_limit_multiplier=None)
    owner = await signup(client)
    org = await create_org(client, owner)
    response = await send(client, owner, "GET", f"/api/orgs/{org['slug']}/secrets")
    assert response.status == 402
    assert await response.json() == {"error": "This feature requires the Pro plan"}
    await make_pro(client, org["id"])
    assert (await send(client, owner, "GET", f"/api/orgs/{org['slug']}/secrets")).status == 200
