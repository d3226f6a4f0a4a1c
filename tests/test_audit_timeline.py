"""One audit timeline per install and per org, in order, filtered, paged by cursor, as JSON lines."""

from __future__ import annotations

import json

from tests.support.accounts import bearer
from tests.support.orgs import ok, org_key, send, world
from tests.support.runtime import member, provider_settings, start_llm, svc_install

DENY_ALL = {"accessPolicyVersion": "1", "defaultAction": "deny", "rules": []}


async def test_the_timeline_orders_a_gated_run_with_a_blocked_request(make_client, aiohttp_server, store):
    llm, url = await start_llm(aiohttp_server)
    client = await make_client(rate_limit_multiplier=None, providers=provider_settings(url))
    _, key, install_id = await svc_install(
        client,
        [member("a", accessPolicy=DENY_ALL), member("b")],
        gates=[{"name": "review", "after": "a"}],
        requiredSecrets=["TOKEN"],
    )
    headers = bearer(key) if isinstance(key, str) else key
    base = f"/api/installs/{install_id}"
    await ok(await client.patch(f"{base}/secrets", json={"TOKEN": "t0p-s3cret"}, headers=headers))
    await ok(await client.patch(f"{base}/schedule", json={"cronExpression": "0 9 * * 1"}, headers=headers))
    llm.script(
        tool_calls=[{"name": "http_request", "arguments": {"method": "GET", "url": "https://x.test/a"}}]
    )
    llm.script(text="A out")
    paused = await ok(await client.post(f"{base}/run", json={"task": "go"}, headers=headers))
    assert paused["status"] == "paused"
    llm.script(text="B out")
    await ok(await client.post(f"{base}/continue", json={}, headers=headers))

    body = await ok(await client.get(f"{base}/audit", headers=headers))
    actions = [e["action"] for e in body["events"]]
    assert actions == ["gate.continue", "egress.blocked", "schedule.changed", "secrets.set"]
    blocked = body["events"][1]
    assert blocked["kind"] == "egress" and blocked["meta"]["hostname"] == "x.test"
    assert body["events"][3]["meta"] == {"keys": ["TOKEN"]}
    assert "t0p-s3cret" not in json.dumps(body)

    only = await ok(await client.get(f"{base}/audit?kind=egress,gate", headers=headers))
    assert [e["action"] for e in only["events"]] == ["gate.continue", "egress.blocked"]
    first = await ok(await client.get(f"{base}/audit?limit=3", headers=headers))
    rest = await ok(await client.get(f"{base}/audit?limit=3&cursor={first['nextCursor']}", headers=headers))
    assert [e["id"] for e in first["events"] + rest["events"]] == [e["id"] for e in body["events"]]
    assert rest["nextCursor"] is None

    lines = await client.get(f"{base}/audit?limit=2", headers={**headers, "Accept": "application/x-ndjson"})
    assert lines.content_type == "application/x-ndjson" and "X-Next-Cursor" in lines.headers
    assert [json.loads(line)["action"] for line in (await lines.text()).splitlines()] == actions[:2]

    assert (await client.get(f"{base}/audit?kind=nope", headers=headers)).status == 400
    assert (await client.get(f"{base}/audit?cursor=garbage!", headers=headers)).status == 400
    _, other, _ = await svc_install(client, [member("x")])
    other_headers = bearer(other) if isinstance(other, str) else other
    assert (await client.get(f"{base}/audit", headers=other_headers)).status == 404


async def test_an_orgs_timeline_joins_its_audit_events_and_its_installs(make_client):
    client = await make_client(rate_limit_multiplier=None)
    w = await world(client, pro=True)
    key = await org_key(client, w.owner, w.slug)
    template = await ok(
        await client.post(
            "/api/templates",
            json={
                "slug": "org-team",
                "name": "Org team",
                "definition": {"agents": [member("lead")], "requiredVariables": ["REGION"]},
            },
            headers=bearer(key),
        ),
        201,
    )
    await ok(await client.post(f"/api/templates/{template['id']}/publish", headers=bearer(key)))
    install = await ok(
        await client.post(
            "/api/installs", json={"templateId": template["id"], "platform": "svc"}, headers=bearer(key)
        ),
        201,
    )
    await ok(
        await client.patch(
            f"/api/installs/{install['installId']}/variables", json={"REGION": "eu"}, headers=bearer(key)
        )
    )
    body = await ok(await send(client, w.admin, "GET", f"{w.base}/audit/timeline"))
    actions = [e["action"] for e in body["events"]]
    assert actions[0] == "variables.set" and "org.created" in actions and "key.created" in actions
    assert actions.index("variables.set") < actions.index("key.created") < actions.index("org.created")
    assert (await send(client, w.member, "GET", f"{w.base}/audit/timeline")).status == 403
    assert (await send(client, w.outsider, "GET", f"{w.base}/audit/timeline")).status == 404
