"""The reach rule (svc/installs/reach.py) as a table, against the embedded database, no app.

The routes' own tests cover reach over HTTP; this table is the fast test `make mutate` runs
against the rule, one principal and install per row (docs/testing.md).
"""

from __future__ import annotations

from typing import Any

import pytest

from svc.identity import Principal
from svc.installs import deployer_reaches, is_visible, reaches
from svc.orgs import OrgReads

USER = {"kind": "user", "id": "u-owner"}
ORG = {"kind": "org", "id": "org-1"}


def install(owner: dict[str, str] = USER, **fields: Any) -> dict[str, Any]:
    return {"_id": "inst-1", "owner": owner, "status": "completed", **fields}


@pytest.fixture
async def members(store: Any) -> Any:
    """org-1 has one member, u-member (a former member, u-gone, is not in it)."""
    membership = {"_id": "m-1", "orgId": "org-1", "userId": "u-member", "role": "member"}
    await store.org_members.insert_one(membership)
    return store


ROWS = [
    # (principal, install, reaches?)
    (Principal("key", user_id="u-owner"), install(), True),
    (Principal("session", user_id="u-owner"), install(), True),
    (Principal("key", user_id="u-other"), install(), False),
    (Principal("key", user_id="u-owner", install_id="inst-1"), install(), True),
    (Principal("key", user_id="u-owner", install_id="inst-2"), install(), False),  # scoped elsewhere
    (Principal("install_token", install_id="inst-1"), install(), True),
    (Principal("install_token", install_id="inst-2"), install(), False),
    (Principal("webhook_token", install_id="inst-1"), install(ORG), True),
    (Principal("app_key", install_id="inst-2"), install(), False),
    (Principal("app_key"), install(), False),  # bound to no install: reaches none
    (Principal("key", org_id="org-1"), install(ORG), True),
    (Principal("key", org_id="org-2"), install(ORG), False),
    (Principal("session", user_id="u-member"), install(ORG), True),  # a member's session
    (Principal("key", user_id="u-member"), install(ORG), False),  # a member's key stays personal
    (Principal("session", user_id="u-gone"), install(ORG), False),  # not a member
    (Principal("session", user_id="u-owner"), install(status="pending"), False),  # provisioning
    (Principal("session", user_id="u-owner"), install(status="pending", approval="pending"), True),
    (Principal("session", user_id="u-owner"), None, False),
]


@pytest.mark.parametrize(("principal", "doc", "expected"), ROWS)
async def test_the_reach_table(members: Any, principal: Principal, doc: Any, expected: bool) -> None:
    assert await reaches(OrgReads(members), principal, doc) is expected


DEPLOYER_ROWS = [
    ("u-owner", install(), True),  # owns it
    ("u-dep", install(deployedBy="u-dep"), True),  # deployed it
    ("u-other", install(), False),
    ("u-member", install(ORG, deployedBy="u-member"), True),  # deployed into the org, still a member
    ("u-gone", install(ORG, deployedBy="u-gone"), False),  # left the org
    ("u-member", install(ORG), False),  # a member who did not deploy it
    ("u-owner", install(status="pending"), False),
    ("u-owner", None, False),
]


@pytest.mark.parametrize(("user_id", "doc", "expected"), DEPLOYER_ROWS)
async def test_the_deployer_table(members: Any, user_id: str, doc: Any, expected: bool) -> None:
    assert await deployer_reaches(OrgReads(members), user_id, doc) is expected


def test_visibility() -> None:
    assert is_visible({"status": "completed"}) and is_visible({"status": "pending", "approval": "pending"})
    assert not is_visible({"status": "pending"}) and not is_visible({"status": "pending", "approval": None})
