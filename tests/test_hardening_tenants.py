"""The cross-tenant walk: every route with an id, called on tenant A's things with each of tenant
B's credentials, answers 404 (or the 400/401/403 of a refused credential or body) and changes nothing.

The figures (calls, 2xx, statuses) are printed for the hardening issue's closing note.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from api.context import ROUTE_TABLE
from tests.support.accounts import app_store, bearer, create_key, signup
from tests.support.installs import managed_install as svc_install
from tests.support.installs import published_team
from tests.support.orgs import create_org, make_pro, send

# A body that would be accepted were the caller allowed, so refusals come from the reach check.
BODIES: dict[str, Any] = {
    "UpdateTemplateBody": {"name": "Hijacked"},
    "PublishBody": {"changeLog": "hijack"},
    "RollbackBody": {"version": 1},
    "RunBody": {"task": "hijack"},
    "InvokeBody": {"inputText": "hijack"},
    "SelfReportBody": {"agentKey": "lead", "status": "completed"},
    "ScheduleBody": {"cronExpression": "0 * * * *"},
    "ToggleBody": {"enabled": True},
    "ContinueBody": {},
    "DraftEdit": {"subject": "hijack"},
    "RejectBody": {"note": "hijack"},
    "BulkBody": {"action": "approve", "ids": [1]},
    "UpdateOrgBody": {"name": "Hijacked"},
    "RoleBody": {"role": "admin"},
    "InvitationBody": {"email": "intruder@example.com"},
    "OrgKeyBody": {"label": "intruder"},
    "GovernanceBody": {"enabled": True},
    "ApprovalDecisionBody": {"status": "approved"},
    "SecretBody": {"key": "STOLEN", "value": "x"},
}
# Collections a refused call may legitimately write (the caller's own sessions, counters, logs).
VOLATILE = {"sessions", "rate_limits", "rate_limit_counters", "outbox", "security_requests"}
ALLOWED = {400, 401, 403, 404}


async def snapshot(store) -> dict[str, str]:
    """Every document of every collection but the volatile ones, as text."""
    names = sorted(set(await store.db.list_collection_names()) - VOLATILE)
    return {
        name: json.dumps(await store[name].find().sort("_id", 1).to_list(None), default=str) for name in names
    }


async def test_no_credential_of_another_tenant_reaches_or_changes_anything(make_client, capsys):
    client = await make_client(rate_limit_multiplier=None)
    # Tenant A: a user with a key, a team-only template and an install of it, a Pro org with a
    # member, an org key, a secret and a pending invitation.
    alice = await signup(client)
    alice_key = await create_key(client, alice)
    template = await published_team(client, alice_key, visibility="team")
    install_id = (await svc_install(client, alice_key, template["id"]))["installId"]
    org = await create_org(client, alice)
    await make_pro(client, org["id"])
    base = f"/api/orgs/{org['slug']}"
    key_id = (await (await client.get("/api/auth/keys", headers=alice.cookie)).json())["keys"][0]["id"]
    org_key = await (await send(client, alice, "POST", f"{base}/keys", {"label": "ci"})).json()
    await send(client, alice, "POST", f"{base}/secrets", {"key": "API_TOKEN", "value": "alice-secret"})
    invitation = await (
        await send(client, alice, "POST", f"{base}/invitations", {"email": "x@example.com"})
    ).json()
    invitation_id = invitation.get("id") or invitation.get("invitation", {}).get("id", "none")

    # Tenant B: every kind of credential.
    bob = await signup(client)
    bob_key = await create_key(client, bob)
    bob_template = await published_team(client, bob_key)
    bob_install = (await svc_install(client, bob_key, bob_template["id"]))["installId"]
    bob_scoped = await create_key(client, bob, installId=bob_install)
    bob_org = await create_org(client, bob)
    await make_pro(client, bob_org["id"])
    bob_org_key = (await (await send(client, bob, "POST", f"/api/orgs/{bob_org['slug']}/keys", {})).json())[
        "key"
    ]
    credentials = {
        "none": {},
        "session": bob.cookie,
        "personal key": bearer(bob_key),
        "install-scoped key": bearer(bob_scoped),
        "org key": bearer(bob_org_key),
    }
    values = {
        "slug": org["slug"],
        "userId": alice.id,
        "name": "review",
        "draftId": "1",
        "key": "API_TOKEN",
        "installId": install_id,
        "runId": "0" * 24,
        "scorecardId": "0" * 24,
        "approvalId": "0" * 24,
        "a": "1",
        "b": "1",
    }

    def concrete(path: str) -> str:
        """Tenant A's ids in the route's path."""

        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            if name == "id":
                if path.startswith("/api/templates"):
                    return template["id"]
                if path.startswith("/api/auth/keys"):
                    return key_id
                if "/invitations/" in path:
                    return invitation_id
                if "/keys/" in path:
                    return org_key["id"]
                if "/approvals/" in path:
                    return "0" * 24
                return install_id
            return values[name]

        return re.sub(r"\{(\w+)\}", one, path)

    routes = [
        r
        for r in client.server.app[ROUTE_TABLE]
        if "{" in r.path and r.auth != "T" and "{token}" not in r.path
    ]
    before = await snapshot(app_store(client))
    statuses: Counter[int] = Counter()
    reached: list[str] = []
    for route in routes:
        body = BODIES.get(route.body.__name__, {}) if route.body is not None else None
        if route.path.endswith("/transfer"):
            body = {"newOwnerId": bob.id, "confirmation": org["name"]}
        if route.path.endswith("/variables"):
            body = {"company": "hijack"}
        if route.path.endswith("/secrets") and "/installs/" in route.path:
            body = {"API_TOKEN": "hijack"}
        for kind, headers in credentials.items():
            response = await client.request(route.method, concrete(route.path), json=body, headers=headers)
            statuses[response.status] += 1
            # Billing routes answer 503 to everyone while no payment provider is configured.
            unconfigured = response.status == 503 and ("/stripe/" in route.path or "/billing/" in route.path)
            if response.status not in ALLOWED and not unconfigured:
                reached.append(f"{route.method} {route.path} with {kind}: {response.status}")
    after = await snapshot(app_store(client))
    calls = sum(statuses.values())
    two_xx = sum(n for status, n in statuses.items() if 200 <= status < 300)
    with capsys.disabled():
        print(
            f"\ncross-tenant walk: {len(routes)} routes x {len(credentials)} credentials = {calls} calls, "
            f"{two_xx} 2xx, statuses {dict(sorted(statuses.items()))}"
        )
    assert reached == []
    assert two_xx == 0
    changed = [name for name in before if before[name] != after.get(name)]
    assert changed == []
