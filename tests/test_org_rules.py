"""The org rule table (svc/orgs/access.py) as a table, against the embedded database, no app.

The org routes' own tests check access over HTTP; this is the fast test `make mutate` runs
against the rule table and `OrgAccess.check` (docs/testing.md). The expected table below is
written from the spec's org table ("Who" column, "Pro" marks), not read from `RULES`.
"""

from __future__ import annotations

from typing import Any

import pytest

from svc.core import BadRequest, Forbidden, NotFound, PaymentRequired
from svc.identity import Accounts
from svc.orgs.access import RULES, SYSTEM, Actor, OrgAccess, check_role, is_pro

ALL = ("owner", "admin", "member")
MANAGE = ("owner", "admin")
OWN = ("owner",)

# action -> (roles the spec allows, Pro needed)
SPEC: dict[str, tuple[tuple[str, ...], bool]] = {
    "org.read": (ALL, False),
    "org.update": (MANAGE, False),
    "org.delete": (OWN, False),
    "org.transfer": (OWN, False),
    "members.list": (ALL, False),
    "members.set_role": (MANAGE, False),
    "members.remove": (MANAGE, False),
    "members.leave": (ALL, False),
    "invitations.create": (MANAGE, False),
    "invitations.list": (MANAGE, False),
    "invitations.cancel": (MANAGE, False),
    "keys.list": (ALL, False),
    "keys.create": (MANAGE, False),
    "keys.revoke": (MANAGE, False),
    "governance.set": (MANAGE, True),
    "approvals.list": (ALL, True),
    "approvals.create": (ALL, True),
    "approvals.decide": (MANAGE, True),
    "secrets.list": (ALL, True),
    "secrets.set": (MANAGE, True),
    "secrets.delete": (MANAGE, True),
    "billing.status": (ALL, False),
    "billing.checkout": (MANAGE, False),
    "billing.portal": (MANAGE, False),
    "billing.cancel": (OWN, False),
    "audit.read": (MANAGE, True),
    "analytics.read": (ALL, False),
}

ROLE_TEXT = {
    ALL: "This action needs the role admin or member or owner",
    MANAGE: "This action needs the role admin or owner",
    OWN: "This action needs the role owner",
}


@pytest.fixture
async def orgs(store: Any) -> OrgAccess:
    """Two live orgs (free `acme`, pro `prime`) and one being deleted (`gone`), each with an
    owner, an admin and a member; `u-out` is a user in none of them."""
    users = [{"_id": f"u-{role}", "email": f"{role}@example.com", "name": role} for role in ALL] + [
        {"_id": "u-out", "email": "out@example.com", "name": "out"},
        {"_id": "u-mute", "name": "mute"},
    ]
    await store.users.insert_many(users)
    await store.orgs.insert_many(
        [
            {"_id": "o-free", "slug": "acme", "name": "Acme", "plan": "free"},
            {"_id": "o-pro", "slug": "prime", "name": "Prime", "plan": "pro"},
            {"_id": "o-del", "slug": "gone", "name": "Gone", "plan": "pro", "deleting": True},
        ]
    )
    await store.org_members.insert_many(
        [
            {"_id": f"m-{org}-{role}", "orgId": org, "userId": f"u-{role}", "role": role}
            for org in ("o-free", "o-pro", "o-del")
            for role in ALL
        ]
        + [{"_id": "m-mute", "orgId": "o-pro", "userId": "u-mute", "role": "member"}]
    )
    return OrgAccess(store, Accounts(store))


def test_the_rule_table_is_the_spec_table() -> None:
    assert set(RULES) == set(SPEC)
    for action, (roles, pro) in SPEC.items():
        assert RULES[action].roles == frozenset(roles), action
        assert RULES[action].pro is pro, action


CASES = [(action, role) for action in SPEC for role in ALL]


@pytest.mark.parametrize(("action", "role"), CASES)
async def test_each_role_on_each_action_of_a_pro_org(orgs: OrgAccess, action: str, role: str) -> None:
    roles, _ = SPEC[action]
    if role in roles:
        access = await orgs.check(f"u-{role}", "prime", action)
        assert access.org["_id"] == "o-pro" and access.role == role
        assert access.actor == Actor(f"u-{role}", f"{role}@example.com")
    else:
        with pytest.raises(Forbidden) as refused:
            await orgs.check(f"u-{role}", "prime", action)
        assert str(refused.value) == ROLE_TEXT[roles]


@pytest.mark.parametrize("action", list(SPEC))
async def test_a_free_org_refuses_pro_actions_with_402_after_the_role(orgs: OrgAccess, action: str) -> None:
    roles, pro = SPEC[action]
    if pro:
        with pytest.raises(PaymentRequired) as refused:
            await orgs.check("u-owner", "acme", action)
        assert str(refused.value) == "This feature requires the Pro plan"
    else:
        assert (await orgs.check("u-owner", "acme", action)).role == "owner"
    if "member" not in roles:  # the role is checked before the plan: 403, not 402
        with pytest.raises(Forbidden):
            await orgs.check("u-member", "acme", action)


@pytest.mark.parametrize(("user", "slug"), [("u-out", "prime"), ("u-owner", "nope"), ("u-owner", "gone")])
async def test_an_outsider_an_unknown_slug_and_a_deleting_org_are_the_same_404(
    orgs: OrgAccess, user: str, slug: str
) -> None:
    with pytest.raises(NotFound) as refused:
        await orgs.check(user, slug, "org.read")
    assert str(refused.value) == "Org not found"


async def test_a_member_of_another_org_is_not_a_member_here(orgs: OrgAccess, store: Any) -> None:
    await store.orgs.insert_one({"_id": "o-x", "slug": "other", "name": "Other", "plan": "pro"})
    with pytest.raises(NotFound):
        await orgs.check("u-owner", "other", "org.read")


async def test_by_slug_and_membership(orgs: OrgAccess) -> None:
    org = await orgs.by_slug("prime")
    assert org is not None and org["_id"] == "o-pro"
    assert await orgs.by_slug("gone") is None and await orgs.by_slug("nope") is None
    assert (await orgs.membership("o-pro", "u-admin"))["role"] == "admin"
    with pytest.raises(NotFound) as missing:
        await orgs.membership("o-pro", "u-out")
    assert str(missing.value) == "Member not found"
    with pytest.raises(NotFound):
        await orgs.membership("o-free", "u-mute")


async def test_actors(orgs: OrgAccess) -> None:
    assert await orgs.actor("u-admin") == Actor("u-admin", "admin@example.com")
    assert await orgs.actor("u-mute") == Actor("u-mute", None)
    assert await orgs.actor_or_system(None) is SYSTEM
    assert await orgs.actor_or_system("u-member") == Actor("u-member", "member@example.com")
    assert await orgs.actor_or_system("u-mute") == Actor("u-mute", None)
    assert await orgs.actor_or_system("u-unknown") == Actor("u-unknown", None)


async def test_manager_emails_are_the_owner_and_admins_sorted(orgs: OrgAccess, store: Any) -> None:
    assert await orgs.manager_emails("o-pro") == ["admin@example.com", "owner@example.com"]
    await store.org_members.update_one({"_id": "m-mute"}, {"$set": {"role": "admin"}})  # no email
    assert await orgs.manager_emails("o-pro") == ["admin@example.com", "owner@example.com"]
    assert await orgs.manager_emails("o-none") == []


def test_check_role_and_is_pro() -> None:
    assert check_role("admin") == "admin" and check_role("member") == "member"
    for role in ("owner", "Admin", "", "members"):
        with pytest.raises(BadRequest) as refused:
            check_role(role)
        assert str(refused.value) == "role: must be admin or member"
    assert is_pro({"plan": "pro"})
    assert not is_pro({"plan": "free"}) and not is_pro({}) and not is_pro({"plan": "PRO"})
