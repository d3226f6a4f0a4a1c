"""Who may call each org route: every role and route cell of the spec's "Who" column, from one table.

Each row gets a fresh org with an owner, an admin, a member and an outsider (members join
through real invitations). Denied roles get 403, outsiders the same 404 as an unknown slug,
API keys 401 (org routes are session-only), and a free org 402 on Pro rows.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.support.accounts import app_store, bearer, create_key
from tests.support.orgs import World, invite, join, make_pro, ok, org_key, send, world

EVERYONE = frozenset({"owner", "admin", "member"})
MANAGERS = frozenset({"owner", "admin"})
OWNER = frozenset({"owner"})
ROLES = ("outsider", "member", "admin", "owner")  # the allowed (and destructive) calls run last


@dataclass(frozen=True)
class Row:
    """One route of the spec's org table and who may call it."""

    method: str
    path: str
    allowed: frozenset[str]
    pro: bool = False
    body: dict[str, Any] | None = None
    status: int = 200
    override: dict[str, int] = field(default_factory=dict)


# THE table (spec "Organisations"). Placeholders are filled per call with fresh things.
TABLE: dict[str, Row] = {
    "get org": Row("GET", "{base}", EVERYONE),
    "update org": Row("PATCH", "{base}", MANAGERS, body={"avatarUrl": "https://img.example.com/a.png"}),
    "delete org": Row("DELETE", "{base}", OWNER),
    "list members": Row("GET", "{base}/members", EVERYONE),
    "set role": Row("PATCH", "{base}/members/{target}/role", MANAGERS, body={"role": "admin"}),
    "remove member": Row("DELETE", "{base}/members/{target}", MANAGERS),
    "leave (self)": Row("DELETE", "{base}/members/{self}", EVERYONE, override={"owner": 409}),
    "transfer": Row(
        "PATCH", "{base}/transfer", OWNER, body={"newOwnerId": "{target}", "confirmation": "{name}"}
    ),
    "invite": Row("POST", "{base}/invitations", MANAGERS, body={"email": "{email}", "role": "member"}),
    "list invitations": Row("GET", "{base}/invitations", MANAGERS),
    "cancel invitation": Row("DELETE", "{base}/invitations/{invitation}", MANAGERS),
    "list keys": Row("GET", "{base}/keys", EVERYONE),
    "create key": Row("POST", "{base}/keys", MANAGERS, body={"label": "k"}),
    "revoke key": Row("DELETE", "{base}/keys/{key}", MANAGERS, status=204),
    "governance": Row("PATCH", "{base}/settings/governance", MANAGERS, pro=True, body={"enabled": True}),
    "list approvals": Row("GET", "{base}/approvals", EVERYONE, pro=True),
    "request approval": Row(
        "POST",
        "{base}/approvals",
        EVERYONE,
        pro=True,
        body={"installId": "{install}", "templateId": "tpl-1", "templateName": "Team"},
    ),
    "decide approval": Row(
        "PATCH", "{base}/approvals/{approval}", MANAGERS, pro=True, body={"status": "approved"}
    ),
    "list secrets": Row("GET", "{base}/secrets", EVERYONE, pro=True),
    "set secret": Row("POST", "{base}/secrets", MANAGERS, pro=True, body={"key": "api key", "value": "v"}),
    "delete secret": Row("DELETE", "{base}/secrets/{secret}", MANAGERS, pro=True, status=204),
    "billing status": Row("GET", "{base}/billing/status", EVERYONE),
    # No payment provider in these tests: the allowed roles reach the 503 of an unconfigured provider.
    "billing checkout": Row("POST", "{base}/billing/checkout", MANAGERS, status=503),
    "billing portal": Row("GET", "{base}/billing/portal", MANAGERS, status=503),
    "billing cancel": Row("POST", "{base}/billing/cancel", OWNER, status=503),
    "audit log": Row("GET", "{base}/audit-log", MANAGERS, pro=True),
    "analytics": Row("GET", "{base}/analytics", EVERYONE),
}


async def seed_org_install(client: Any, w: World) -> str:
    """An install record owned by the org (approval requests must name one of the org's installs)."""
    install_id = f"inst-{uuid.uuid4().hex[:8]}"
    await app_store(client).installs.insert_one(
        {
            "_id": install_id,
            "owner": {"kind": "org", "id": w.org["id"]},
            "status": "completed",
            "platform": "orchA",
            "templateId": "tpl-1",
            "templateName": "Team",
        }
    )
    return install_id


async def fill(client: Any, w: World, role: str, text: str, *, fresh: bool) -> str:
    """Replace placeholders; with `fresh`, create the thing each one names (else a dummy id)."""
    if "{target}" in text:
        target = (await join(client, w.owner, w.slug)).id if fresh else "nobody"
        text = text.replace("{target}", target)
    if "{invitation}" in text:
        invitation = await invite(client, w.owner, w.slug, f"x-{uuid.uuid4().hex[:8]}@example.com")
        text = text.replace("{invitation}", invitation["id"])
    if "{key}" in text:
        await org_key(client, w.owner, w.slug)
        keys = await ok(await send(client, w.owner, "GET", f"{w.base}/keys"))
        text = text.replace("{key}", keys["keys"][0]["id"])
    if "{approval}" in text:
        approval = "nope"
        if fresh:
            body = {
                "installId": await seed_org_install(client, w),
                "templateId": "tpl-1",
                "templateName": "T",
            }
            created = await ok(await send(client, w.owner, "POST", f"{w.base}/approvals", body))
            approval = created["approval"]["id"]
        text = text.replace("{approval}", approval)
    if "{secret}" in text:
        secret = f"S_{uuid.uuid4().hex[:6].upper()}"
        if fresh:
            await ok(await send(client, w.owner, "POST", f"{w.base}/secrets", {"key": secret, "value": "x"}))
        text = text.replace("{secret}", secret)
    if "{install}" in text:
        text = text.replace("{install}", await seed_org_install(client, w))
    return (
        text.replace("{base}", w.base)
        .replace("{self}", w.by_role(role).id)
        .replace("{name}", w.org["name"])
        .replace("{email}", f"new-{uuid.uuid4().hex[:8]}@example.com")
    )


async def call(client: Any, w: World, row: Row, role: str, *, fresh: bool = True) -> Any:
    path = await fill(client, w, role, row.path, fresh=fresh)
    body = None
    if row.body is not None:
        body = {
            k: await fill(client, w, role, v, fresh=fresh) if isinstance(v, str) else v
            for k, v in row.body.items()
        }
    return await send(client, w.by_role(role), row.method, path, body)


def expected(row: Row, role: str) -> int:
    if role == "outsider":
        return 404
    if role in row.override:
        return row.override[role]
    return row.status if role in row.allowed else 403


@pytest.mark.parametrize("name", list(TABLE))
async def test_role_matrix(make_client, name):
    row = TABLE[name]
    client = await make_client(rate_limit_multiplier=None)
    w = await world(client)
    if row.pro:
        # On a free org: allowed roles 402, others as usual.
        for role in ROLES:
            response = await call(client, w, row, role, fresh=False)
            want = 402 if role in row.allowed else expected(row, role)
            assert response.status == want, (name, role, "free", await response.text())
        await make_pro(client, w.org["id"])
    for role in ROLES:
        response = await call(client, w, row, role)
        assert response.status == expected(row, role), (name, role, await response.text())
        if response.status >= 400:
            assert set(await response.json()) == {"error"}


@pytest.mark.parametrize("name", list(TABLE))
async def test_api_keys_get_401_on_every_org_route(make_client, name):
    row = TABLE[name]
    client = await make_client(rate_limit_multiplier=None)
    w = await world(client, pro=True)
    personal = await create_key(client, w.owner)
    org = await org_key(client, w.owner, w.slug)
    path = (await fill(client, w, "owner", row.path, fresh=False)).replace(w.base, w.base)
    for key in (personal, org):
        response = await client.request(row.method, path, json=row.body, headers=bearer(key))
        assert response.status == 401, (name, await response.text())


async def test_unknown_slug_and_non_member_get_the_same_404(make_client):
    client = await make_client(rate_limit_multiplier=None)
    w = await world(client)
    outsider = await send(client, w.outsider, "GET", w.base)
    unknown = await send(client, w.outsider, "GET", "/api/orgs/no-such-org")
    assert outsider.status == unknown.status == 404
    assert await outsider.json() == await unknown.json() == {"error": "Org not found"}
    assert (await send(client, None, "GET", w.base)).status == 401
