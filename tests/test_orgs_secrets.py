"""The org secret vault: normalised keys, upserts, values never returned, injected into org runs."""

from __future__ import annotations

import json

from tests.support.accounts import app_store, bearer
from tests.support.orgs import audit_actions, ok, org_key, send, world
from tests.support.runtime import member, provider_settings, start_llm, start_target
from tests.support.templates import publish_template


async def test_keys_are_normalised_values_encrypted_and_never_returned(make_client):
    client = await make_client(rate_limit_multiplier=None)
    w = await world(client, pro=True)
    path = f"{w.base}/secrets"
    for raw, normal in (
        ("openai api-key", "OPENAI_API_KEY"),
        ("crmToken", "CRM_TOKEN"),
        ("  Stripe.Secret  ", "STRIPE_SECRET"),
    ):
        body = await ok(
            await send(client, w.admin, "POST", path, {"key": raw, "value": f"value-of-{normal}"})
        )
        assert body == {"ok": True, "key": normal}
    for bad in ("---", "   ", "9LIVES"):
        response = await send(client, w.admin, "POST", path, {"key": bad, "value": "x"})
        assert response.status == 400, bad
    assert (await send(client, w.admin, "POST", path, {"key": "X", "value": ""})).status == 400

    # Upsert: the same normalised key replaces the value.
    await ok(await send(client, w.owner, "POST", path, {"key": "OPENAI_API_KEY", "value": "rotated"}))
    listed = (await ok(await send(client, w.member, "GET", path)))["secrets"]
    assert [s["key"] for s in listed] == ["CRM_TOKEN", "OPENAI_API_KEY", "STRIPE_SECRET"]
    assert set(listed[0]) == {"id", "key", "createdAt", "updatedAt"}
    assert "rotated" not in json.dumps(listed) and "value-of" not in json.dumps(listed)
    stored = await app_store(client)["org_secrets"].find_one({"orgId": w.org["id"], "key": "OPENAI_API_KEY"})
    assert "rotated" not in json.dumps(stored, default=str) and stored["valueEncrypted"]

    assert (await send(client, w.admin, "DELETE", f"{path}/crm token")).status == 204
    assert (await send(client, w.admin, "DELETE", f"{path}/CRM_TOKEN")).status == 404
    assert [s["key"] for s in (await ok(await send(client, w.member, "GET", path)))["secrets"]] == [
        "OPENAI_API_KEY",
        "STRIPE_SECRET",
    ]
    events = [
        (e["action"], e["meta"])
        for e in await audit_actions(client, w.org["id"])
        if e["action"].startswith("secret.")
    ]
    assert events == [
        ("secret.created", {"key": "OPENAI_API_KEY"}),
        ("secret.created", {"key": "CRM_TOKEN"}),
        ("secret.created", {"key": "STRIPE_SECRET"}),
        ("secret.updated", {"key": "OPENAI_API_KEY"}),
        ("secret.deleted", {"key": "CRM_TOKEN"}),
    ]
    everything = json.dumps(await audit_actions(client, w.org["id"]), default=str)
    assert "rotated" not in everything and "value-of" not in everything


async def test_org_secrets_reach_runs_and_install_secrets_win(make_client, aiohttp_server):
    llm, url = await start_llm(aiohttp_server)
    target = await start_target(aiohttp_server)
    client = await make_client(rate_limit_multiplier=None, providers=provider_settings(url))
    w = await world(client, pro=True)
    for name, value in (("SHARED_TOKEN", "from-org"), ("ORG_ONLY", "org-only-value")):
        await ok(await send(client, w.admin, "POST", f"{w.base}/secrets", {"key": name, "value": value}))
    key = await org_key(client, w.owner, w.slug)
    team = {"version": "v1", "agents": [member("lead")], "requiredSecrets": ["SHARED_TOKEN", "ORG_ONLY"]}
    template = await publish_template(client, key, visibility="team", definition=team)
    created = await client.post(
        "/api/installs", json={"templateId": template["id"], "platform": "svc"}, headers=bearer(key)
    )
    install_id = (await ok(created, 201))["installId"]
    secrets = await client.patch(
        f"/api/installs/{install_id}/secrets", json={"SHARED_TOKEN": "from-install"}, headers=bearer(key)
    )
    assert secrets.status == 200

    call = {
        "name": "http_request",
        "arguments": {
            "method": "GET",
            "url": f"{target.base}/check?shared=${{SHARED_TOKEN}}&org=${{ORG_ONLY}}",
        },
    }
    llm.script(tool_calls=[call])
    llm.script(text="done")
    run = await client.post(f"/api/installs/{install_id}/run", json={"task": "check"}, headers=bearer(key))
    assert (await ok(run))["status"] == "completed"
    assert target.received[0]["query"] == {"shared": "from-install", "org": "org-only-value"}
