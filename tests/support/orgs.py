"""Shared helpers for the org tests: orgs, members (through real invitations), keys and plans.

A plain module (not a conftest): the test modules import what they use.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from api.context import SERVICES
from tests.support.accounts import Caller, app_store, bearer, signup

LINK = re.compile(r"/invitations/([A-Za-z0-9_-]+)")


@dataclass
class World:
    """An org with one user per role, plus an outsider."""

    org: dict[str, Any]
    owner: Caller
    admin: Caller
    member: Caller
    outsider: Caller
    extra: list[Caller] = field(default_factory=list)

    @property
    def slug(self) -> str:
        return str(self.org["slug"])

    @property
    def base(self) -> str:
        return f"/api/orgs/{self.slug}"

    def by_role(self, role: str) -> Caller:
        return {"owner": self.owner, "admin": self.admin, "member": self.member, "outsider": self.outsider}[
            role
        ]


async def send(
    client: Any, caller: Caller | None, method: str, path: str, body: Any = None, **kw: Any
) -> Any:
    """One request with the caller's session cookie (or none)."""
    headers = dict(caller.cookie) if caller is not None else {}
    headers.update(kw.pop("headers", {}))
    return await client.request(method, path, json=body, headers=headers, **kw)


async def ok(response: Any, status: int = 200) -> Any:
    """Assert the status; the JSON body (None for 204)."""
    assert response.status == status, (response.status, await response.text())
    return None if status == 204 else await response.json()


async def create_org(client: Any, owner: Caller, name: str | None = None) -> dict[str, Any]:
    """POST /api/orgs as the owner; the org."""
    name = name or f"Acme {uuid.uuid4().hex[:6]}"
    body = await ok(await send(client, owner, "POST", "/api/orgs", {"name": name}))
    return dict(body["org"])


async def last_mail(client: Any, to: str, kind: str) -> dict[str, Any]:
    """The newest outbox message of this kind to this address."""
    doc = await app_store(client)["outbox"].find_one({"to": to, "kind": kind}, sort=[("createdAt", -1)])
    assert doc is not None, f"no {kind} mail to {to}"
    return dict(doc)


async def invitation_token(client: Any, email: str) -> str:
    """The token of the newest invitation link mailed to this address."""
    mail = await last_mail(client, email, "org_invitation")
    match = LINK.search(mail["body"])
    assert match is not None, mail["body"]
    return match.group(1)


async def invite(client: Any, inviter: Caller, slug: str, email: str, role: str = "member") -> dict[str, Any]:
    """Invite over HTTP; the invitation."""
    body = {"email": email, "role": role}
    return dict(
        (await ok(await send(client, inviter, "POST", f"/api/orgs/{slug}/invitations", body)))["invitation"]
    )


async def join(client: Any, inviter: Caller, slug: str, role: str = "member", name: str = "Member") -> Caller:
    """A new user who joins the org through a real invitation (email link, accept)."""
    user = await signup(client, name=name)
    await invite(client, inviter, slug, user.email, role)
    token = await invitation_token(client, user.email)
    await ok(await send(client, user, "POST", f"/api/invitations/{token}/accept"))
    return user


async def world(client: Any, *, pro: bool = False) -> World:
    """An org with an owner, an admin, a member and an outsider (all over HTTP)."""
    owner = await signup(client, name="Olive Owner")
    org = await create_org(client, owner)
    admin = await join(client, owner, org["slug"], "admin", name="Adam Admin")
    member = await join(client, owner, org["slug"], "member", name="Mia Member")
    outsider = await signup(client, name="Otto Outsider")
    if pro:
        await make_pro(client, org["id"])
    return World(org, owner, admin, member, outsider)


async def make_pro(client: Any, org_id: str, status: str = "active") -> dict[str, Any]:
    """Make the org Pro the way the payment webhook will: through Plans.apply_subscription.

    The payment-provider calls are another engineer's work; the domain function they call
    is the single place plans change, so tests use it rather than writing `plan` directly.
    """
    orgs = client.server.app[SERVICES].org_plans
    return dict(
        await orgs.apply_subscription(
            org_id,
            status=status,
            trial_end=None,
            current_period_end=None,
            cancel_at_period_end=False,
            customer_id="cus_test",
            subscription_id="sub_test",
        )
    )


async def org_key(client: Any, caller: Caller, slug: str, label: str = "ci") -> str:
    """A new org key (raw value) created over HTTP."""
    body = await ok(await send(client, caller, "POST", f"/api/orgs/{slug}/keys", {"label": label}))
    return str(body["key"])


async def audit_actions(client: Any, org_id: str) -> list[dict[str, Any]]:
    """Every audit event of the org, oldest first (read from the database)."""
    cursor = app_store(client)["org_audit"].find({"orgId": org_id}).sort("createdAt", 1)
    return list(await cursor.to_list(None))


__all__ = ["World", "bearer"]
