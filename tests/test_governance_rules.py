"""Org governance (svc/orgs/governance.py) as tables, against the embedded database, no app.

The routes' own tests (tests/test_orgs_governance.py) walk governance over HTTP with a local
Ray; this is the fast test `make mutate` runs against its rules (docs/testing.md): when an
install waits, the request and who is mailed, deciding once, the install following the
decision, the lapse with the Pro plan, and the rejection of an org's waiting installs. The
expected values come from the spec (Organisation, Approval request, the org table) and
docs/orgs.md, not from the code.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from svc.core import BadRequest, Conflict, Forbidden, NotFound, PaymentRequired, Store
from svc.identity import Principal
from svc.orgs import ApprovalDecisionBody, ApprovalRequestBody, GovernanceBody
from tests.support.governance import (
    NOW,
    PUBLIC_URL,
    Services,
    audit_events,
    outbox,
    seed_waiting_install,
)

STAMP = "2030-03-15T12:00:00.000Z"  # NOW on the wire
MANAGERS = ["admin@example.com", "owner@example.com"]
LAPSE_NOTE = "Governance lapsed with the Pro plan"


async def approval(store: Store, approval_id: str) -> dict[str, Any]:
    doc = await store["org_approvals"].find_one({"_id": approval_id})
    assert doc is not None
    return doc


async def install(store: Store, install_id: str) -> dict[str, Any]:
    doc = await store.installs.find_one({"_id": install_id})
    assert doc is not None
    return doc


# ---- the gate: does a new install wait? ------------------------------------------------

GATE_ROWS = [
    ({"kind": "org", "id": "o-pro"}, True),  # Pro, governance on
    ({"kind": "org", "id": "o-calm"}, False),  # Pro, governance off
    ({"kind": "org", "id": "o-free"}, False),  # governance on, but free: it applies only while Pro
    ({"kind": "org", "id": "o-none"}, False),  # no such org
    ({"kind": "user", "id": "o-pro"}, False),  # a user's install never waits, whatever its id
    ({"id": "o-pro"}, False),  # no kind: not an org
]


@pytest.mark.parametrize(("owner", "waits"), GATE_ROWS)
async def test_the_gate_table(gov: Services, owner: dict[str, str], waits: bool) -> None:
    assert await gov.governance.requires_approval(owner) is waits


async def test_an_org_without_the_governance_field_does_not_gate(gov: Services) -> None:
    await gov.store.orgs.update_one({"_id": "o-pro"}, {"$unset": {"governanceEnabled": ""}})
    assert await gov.governance.requires_approval({"kind": "org", "id": "o-pro"}) is False


# ---- the automatic request of a gated install ------------------------------------------

REQUESTOR_ROWS = [
    # (principal, requestedBy, requestedByEmail, how the mail names the requestor)
    (Principal("session", user_id="u-member"), "u-member", "member@example.com", "member@example.com"),
    # An org key: the key's creator asks.
    (Principal("key", org_id="o-pro", key_id="k-made"), "u-admin", "admin@example.com", "admin@example.com"),
    # A user named and a key: the user asks, not the key's creator.
    (
        Principal("key", user_id="u-member", key_id="k-made"),
        "u-member",
        "member@example.com",
        "member@example.com",
    ),
    (Principal("key", org_id="o-pro", key_id="k-anon"), None, None, "An org key"),  # no creator
    (Principal("key", org_id="o-pro", key_id="k-none"), None, None, "An org key"),  # key gone
    (Principal("app_key"), None, None, "An org key"),  # no user, no key
    (Principal("session", user_id="u-mute"), "u-mute", None, "An org key"),  # a user without email
]


@pytest.mark.parametrize(("principal", "by", "by_email", "named"), REQUESTOR_ROWS)
async def test_the_automatic_request_names_its_requestor(
    gov: Services, principal: Principal, by: str | None, by_email: str | None, named: str
) -> None:
    store = gov.store
    await store.api_keys.insert_many(
        [{"_id": "k-made", "orgId": "o-pro", "createdBy": "u-admin"}, {"_id": "k-anon", "orgId": "o-pro"}]
    )
    await seed_waiting_install(store, "i-1", "o-pro")
    doc = await install(store, "i-1")
    approval_id = await gov.governance.request_approval(doc, principal)

    assert isinstance(approval_id, str)
    stored = await approval(store, approval_id)
    assert stored == {
        "_id": approval_id,
        "orgId": "o-pro",
        "installId": "i-1",
        "templateId": "t-1",
        "templateName": "Template t-1",
        "requestedBy": by,
        "requestedByEmail": by_email,
        "status": "pending",
        "note": None,
        "reviewedBy": None,
        "reviewedByEmail": None,
        "reviewedAt": None,
        "createdAt": NOW,
    }
    assert await audit_events(store, "o-pro") == [
        {
            "action": "approval.requested",
            "actorId": by,
            "actorEmail": by_email,
            "meta": {"approvalId": approval_id, "installId": "i-1", "templateId": "t-1"},
        }
    ]
    body = (
        f"{named} asks to deploy Template t-1 (install i-1) in Prime.\n\n"
        f"Review it: {PUBLIC_URL}/orgs/prime/approvals"
    )
    assert await outbox(store) == [
        {
            "to": to,
            "subject": "Deployment approval requested: Template t-1",
            "body": body,
            "kind": "org_approval_requested",
        }
        for to in MANAGERS
    ]


# ---- governance on and off --------------------------------------------------------------


@pytest.mark.parametrize("user", ["u-owner", "u-admin"])
async def test_owners_and_admins_turn_governance_off_and_on(gov: Services, user: str) -> None:
    store = gov.store
    view = await gov.approvals.set_governance(user, "prime", GovernanceBody(enabled=False))
    assert view == {
        "id": "o-pro",
        "name": "Prime",
        "slug": "prime",
        "plan": "pro",
        "billingEmail": None,
        "avatarUrl": None,
        "governanceEnabled": False,
        "currentPeriodEnd": None,
        "cancelAtPeriodEnd": False,
        "createdAt": "2030-01-01T00:00:00.000Z",
    }
    org = await store.orgs.find_one({"_id": "o-pro"})
    assert org is not None and org["governanceEnabled"] is False and org["updatedAt"] == NOW
    assert await gov.governance.requires_approval({"kind": "org", "id": "o-pro"}) is False
    view = await gov.approvals.set_governance(user, "prime", GovernanceBody(enabled=True))
    assert view["governanceEnabled"] is True
    assert await gov.governance.requires_approval({"kind": "org", "id": "o-pro"}) is True
    # Only the org named changes.
    calm = await store.orgs.find_one({"_id": "o-calm"})
    assert calm is not None and calm["governanceEnabled"] is False and "updatedAt" not in calm
    actor = {"actorId": user, "actorEmail": f"{user[2:]}@example.com", "meta": {}}
    assert await audit_events(store, "o-pro") == [
        {"action": "governance.disabled", **actor},
        {"action": "governance.enabled", **actor},
    ]


async def test_setting_governance_to_what_it_is_records_no_event(gov: Services) -> None:
    view = await gov.approvals.set_governance("u-owner", "prime", GovernanceBody(enabled=True))
    assert view["governanceEnabled"] is True
    view = await gov.approvals.set_governance("u-owner", "calm", GovernanceBody(enabled=False))
    assert view["governanceEnabled"] is False
    assert await audit_events(gov.store, "o-pro") == [] and await audit_events(gov.store, "o-calm") == []


async def test_governance_is_set_by_managers_of_a_pro_org_only(gov: Services) -> None:
    with pytest.raises(Forbidden):
        await gov.approvals.set_governance("u-member", "prime", GovernanceBody(enabled=False))
    with pytest.raises(PaymentRequired):
        await gov.approvals.set_governance("u-owner", "acme", GovernanceBody(enabled=False))
    with pytest.raises(NotFound):
        await gov.approvals.set_governance("u-out", "prime", GovernanceBody(enabled=False))
    org = await gov.store.orgs.find_one({"_id": "o-pro"})
    assert org is not None and org["governanceEnabled"] is True


# ---- listing ---------------------------------------------------------------------------


async def seed_requests(store: Store) -> None:
    """Requests straight in the store, at distinct times (the clock is frozen)."""
    rows = [
        ("a-1", "o-pro", "pending", 1),
        ("a-2", "o-pro", "approved", 3),
        ("a-3", "o-pro", "rejected", 2),
        ("a-4", "o-pro", "pending", 3),  # same time as a-2: the id breaks the tie
        ("a-5", "o-calm", "pending", 4),  # another org's
    ]
    await store["org_approvals"].insert_many(
        [
            {
                "_id": approval_id,
                "orgId": org_id,
                "installId": f"i-{approval_id}",
                "templateId": "t-1",
                "templateName": "Template t-1",
                "requestedBy": "u-member",
                "requestedByEmail": "member@example.com",
                "status": status,
                "createdAt": NOW.replace(day=day),
            }
            for approval_id, org_id, status, day in rows
        ]
    )


LIST_ROWS = [
    (None, ["a-4", "a-2", "a-3", "a-1"]),
    ("pending", ["a-4", "a-1"]),
    ("approved", ["a-2"]),
    ("rejected", ["a-3"]),
]


@pytest.mark.parametrize(("status", "expected"), LIST_ROWS)
async def test_the_listing_is_the_orgs_newest_first(
    gov: Services, status: str | None, expected: list[str]
) -> None:
    await seed_requests(gov.store)
    listed = await gov.approvals.approvals("u-member", "prime", status)
    assert [a["id"] for a in listed] == expected


async def test_a_listed_request_is_the_spec_resource(gov: Services) -> None:
    await seed_requests(gov.store)
    [first] = await gov.approvals.approvals("u-member", "calm", None)
    assert first == {
        "id": "a-5",
        "orgId": "o-calm",
        "installId": "i-a-5",
        "templateId": "t-1",
        "templateName": "Template t-1",
        "requestedBy": "u-member",
        "requestedByEmail": "member@example.com",
        "status": "pending",
        "note": None,
        "reviewedBy": None,
        "reviewedByEmail": None,
        "reviewedAt": None,
        "createdAt": "2030-03-04T12:00:00.000Z",
    }


async def test_the_listing_is_bounded_to_the_newest_500(gov: Services) -> None:
    """A hot read stays bounded (MAX_LISTED): an org with more requests lists its newest 500."""
    base = {"orgId": "o-pro", "installId": "i-x", "templateId": "t-1", "templateName": "T"}
    base["status"] = "pending"
    await gov.store["org_approvals"].insert_many(
        [{**base, "_id": f"a-{n:04}", "createdAt": NOW - timedelta(minutes=n)} for n in range(501)]
    )
    listed = await gov.approvals.approvals("u-member", "prime", None)
    assert len(listed) == 500 and listed[0]["id"] == "a-0000" and listed[-1]["id"] == "a-0499"


async def test_listing_is_for_members_of_a_pro_org(gov: Services) -> None:
    with pytest.raises(PaymentRequired):
        await gov.approvals.approvals("u-member", "acme", None)
    with pytest.raises(NotFound):
        await gov.approvals.approvals("u-out", "prime", None)


# ---- a request made by hand ------------------------------------------------------------


def request_body(install_id: str = "i-1", template_id: str = "t-1", name: str = "Typed name") -> Any:
    return ApprovalRequestBody(installId=install_id, templateId=template_id, templateName=name)


async def test_a_member_asks_by_hand_and_the_managers_are_mailed(gov: Services) -> None:
    store = gov.store
    await seed_waiting_install(store, "i-1", "o-pro")
    view = await gov.approvals.create_approval("u-member", "prime", request_body())
    assert view["status"] == "pending" and view["installId"] == "i-1" and view["orgId"] == "o-pro"
    # The name is the install's own, not what the requester typed.
    assert view["templateName"] == "Template t-1" and view["templateId"] == "t-1"
    assert view["requestedBy"] == "u-member" and view["requestedByEmail"] == "member@example.com"
    assert view["createdAt"] == STAMP and view["reviewedAt"] is None
    assert (await approval(store, view["id"]))["status"] == "pending"
    mails = await outbox(store)
    assert [m["to"] for m in mails] == MANAGERS
    assert {m["subject"] for m in mails} == {"Deployment approval requested: Template t-1"}


async def test_a_request_by_hand_answers_the_request_it_opened(gov: Services) -> None:
    await seed_requests(gov.store)  # older requests, of this org and another
    await seed_waiting_install(gov.store, "i-1", "o-pro")
    view = await gov.approvals.create_approval("u-admin", "prime", request_body())
    assert view["id"] not in {"a-1", "a-2", "a-3", "a-4", "a-5"}
    assert view["installId"] == "i-1" and view["requestedBy"] == "u-admin" and view["status"] == "pending"
    newest, *_ = await gov.approvals.approvals("u-admin", "prime", "pending")
    assert newest["id"] == view["id"]


async def test_a_request_by_hand_needs_an_install_of_the_org_and_its_template(gov: Services) -> None:
    store = gov.store
    await seed_waiting_install(store, "i-calm", "o-calm")  # another org's
    await store.installs.insert_one(  # a user's install whose owner id is the org's
        {"_id": "i-user", "owner": {"kind": "user", "id": "o-pro"}, "templateId": "t-1", "templateName": "T"}
    )
    await seed_waiting_install(store, "i-1", "o-pro")
    for install_id in ("i-calm", "i-user", "i-none"):
        with pytest.raises(NotFound) as missing:
            await gov.approvals.create_approval("u-member", "prime", request_body(install_id))
        assert str(missing.value) == "Install not found"
    with pytest.raises(BadRequest) as wrong:
        await gov.approvals.create_approval("u-member", "prime", request_body(template_id="t-2"))
    assert str(wrong.value) == "templateId: not the template of this install"
    with pytest.raises(PaymentRequired):
        await gov.approvals.create_approval("u-owner", "acme", request_body())
    assert await store["org_approvals"].count_documents({}) == 0 and await outbox(store) == []


# ---- deciding --------------------------------------------------------------------------


async def open_request(
    gov: Services, install_id: str = "i-1", org_id: str = "o-pro", by: str = "u-member"
) -> str:
    await seed_waiting_install(gov.store, install_id, org_id)
    doc = await install(gov.store, install_id)
    approval_id = await gov.governance.request_approval(doc, Principal("session", user_id=by))
    await gov.store["outbox"].delete_many({})  # the request's own mail is tested above
    await gov.store["org_audit"].delete_many({})
    return approval_id


@pytest.mark.parametrize("user", ["u-owner", "u-admin"])
async def test_an_approved_install_becomes_ready_and_the_requestor_is_told(gov: Services, user: str) -> None:
    store = gov.store
    approval_id = await open_request(gov)
    body = ApprovalDecisionBody(status="approved", note="Looks fine")
    view = await gov.approvals.decide(user, "prime", approval_id, body)
    email = f"{user[2:]}@example.com"
    assert view["status"] == "approved" and view["note"] == "Looks fine"
    assert view["reviewedBy"] == user and view["reviewedByEmail"] == email and view["reviewedAt"] == STAMP
    stored = await approval(store, approval_id)
    assert stored["status"] == "approved" and stored["reviewedBy"] == user
    ready = await install(store, "i-1")
    assert ready["status"] == "completed" and ready["approval"] == "approved"
    assert await audit_events(store, "o-pro") == [
        {
            "action": "approval.approved",
            "actorId": user,
            "actorEmail": email,
            "meta": {"approvalId": approval_id, "installId": "i-1", "note": "Looks fine"},
        }
    ]
    assert await outbox(store) == [
        {
            "to": "member@example.com",
            "subject": "Deployment approved: Template t-1",
            "body": f"{email} approved the deployment of Template t-1 (install i-1) in Prime."
            "\n\nNote from the reviewer: Looks fine",
            "kind": "org_approval_decided",
        }
    ]


async def test_a_rejected_install_is_cancelled_and_its_token_stops(gov: Services) -> None:
    store = gov.store
    approval_id = await open_request(gov)
    view = await gov.approvals.decide(
        "u-admin", "prime", approval_id, ApprovalDecisionBody(status="rejected")
    )
    assert view["status"] == "rejected" and view["note"] is None
    gone = await install(store, "i-1")
    assert gone["approval"] == "rejected" and gone["status"] == "cancelled" and "webhookTokenHash" not in gone
    [event] = await audit_events(store, "o-pro")
    assert event["action"] == "approval.rejected" and event["meta"]["note"] is None
    assert await outbox(store) == [
        {
            "to": "member@example.com",
            "subject": "Deployment rejected: Template t-1",
            "body": "admin@example.com rejected the deployment of Template t-1 (install i-1) in Prime.",
            "kind": "org_approval_decided",
        }
    ]


async def test_a_requestor_without_email_is_not_mailed(gov: Services) -> None:
    approval_id = await open_request(gov, by="u-mute")
    await gov.approvals.decide("u-owner", "prime", approval_id, ApprovalDecisionBody(status="approved"))
    assert (await install(gov.store, "i-1"))["status"] == "completed"
    assert await outbox(gov.store) == []


@pytest.mark.parametrize("first", ["approved", "rejected"])
async def test_a_request_is_decided_once(gov: Services, first: str) -> None:
    approval_id = await open_request(gov)
    await gov.approvals.decide("u-owner", "prime", approval_id, ApprovalDecisionBody(status=first))  # type: ignore[arg-type]
    for second in ("approved", "rejected"):
        with pytest.raises(Conflict) as again:
            body = ApprovalDecisionBody(status=second, note="again")  # type: ignore[arg-type]
            await gov.approvals.decide("u-admin", "prime", approval_id, body)
        assert str(again.value) == f"Approval request is already {first}"
    stored = await approval(gov.store, approval_id)
    assert stored["status"] == first and stored["reviewedBy"] == "u-owner" and stored["note"] is None
    assert len(await outbox(gov.store)) == 1


async def test_deciding_another_orgs_request_or_none_is_not_found(gov: Services) -> None:
    calm_request = await open_request(gov, "i-calm", "o-calm")
    for approval_id in (calm_request, "a-none"):
        with pytest.raises(NotFound) as missing:
            await gov.approvals.decide(
                "u-owner", "prime", approval_id, ApprovalDecisionBody(status="approved")
            )
        assert str(missing.value) == "Approval request not found"
    assert (await approval(gov.store, calm_request))["status"] == "pending"
    assert (await install(gov.store, "i-calm"))["status"] == "pending"


async def test_members_do_not_decide_and_free_orgs_cannot(gov: Services) -> None:
    approval_id = await open_request(gov)
    with pytest.raises(Forbidden):
        await gov.approvals.decide("u-member", "prime", approval_id, ApprovalDecisionBody(status="approved"))
    with pytest.raises(PaymentRequired):
        await gov.approvals.decide("u-owner", "acme", approval_id, ApprovalDecisionBody(status="approved"))
    assert (await approval(gov.store, approval_id))["status"] == "pending"


# ---- the lapse with the Pro plan, and an org's deletion -----------------------------------


async def test_the_lapse_approves_what_waits_in_that_org_only(gov: Services) -> None:
    store = gov.store
    waiting = [await open_request(gov, f"i-{n}") for n in (1, 2)]
    decided = await open_request(gov, "i-3")
    await gov.approvals.decide("u-owner", "prime", decided, ApprovalDecisionBody(status="rejected"))
    elsewhere = await open_request(gov, "i-calm", "o-calm")  # clears the mail and audit so far
    org = await store.orgs.find_one({"_id": "o-pro"})
    assert org is not None
    await gov.approvals.lapse(org)
    for approval_id, install_id in zip(waiting, ("i-1", "i-2"), strict=True):
        stored = await approval(store, approval_id)
        assert stored["status"] == "approved" and stored["note"] == LAPSE_NOTE
        assert stored["reviewedBy"] is None and stored["reviewedByEmail"] is None
        assert (await install(store, install_id))["status"] == "completed"
    assert (await approval(store, decided))["status"] == "rejected"
    assert (await approval(store, elsewhere))["status"] == "pending"
    assert (await install(store, "i-calm"))["approval"] == "pending"
    events = await audit_events(store, "o-pro")
    assert [(e["action"], e["actorId"], e["meta"]["note"]) for e in events] == [
        ("approval.approved", None, LAPSE_NOTE)
    ] * 2
    assert await outbox(store) == [
        {
            "to": "member@example.com",
            "subject": "Deployment approved: Template t-1",
            "body": f"The service approved the deployment of Template t-1 (install {install_id}) in Prime."
            f"\n\nNote from the reviewer: {LAPSE_NOTE}",
            "kind": "org_approval_decided",
        }
        for install_id in ("i-1", "i-2")
    ]


async def test_an_org_being_deleted_rejects_its_waiting_installs_only(gov: Services) -> None:
    store = gov.store
    for install_id in ("i-1", "i-2"):
        await seed_waiting_install(store, install_id, "o-pro")
    await seed_waiting_install(store, "i-ready", "o-pro", status="completed", approval="approved")
    await seed_waiting_install(store, "i-calm", "o-calm")
    await gov.approvals.cancel_waiting("o-pro")
    for install_id in ("i-1", "i-2"):
        gone = await install(store, install_id)
        assert gone["approval"] == "rejected" and gone["status"] == "cancelled"
    assert (await install(store, "i-ready"))["status"] == "completed"
    assert (await install(store, "i-calm"))["approval"] == "pending"
