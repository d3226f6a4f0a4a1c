"""Org governance and plans built directly over a test's store, no app and no Ray: the
services the fast rule tables (tests/test_governance_rules.py, tests/test_plan_rules.py) drive.

Built as svc/wiring.py builds them. Mail goes to the `outbox` collection (no SMTP URL), so
what was sent is read back from there. Installs seeded here are on the managed `svc`
platform, so a rejection retires them without calling any platform upstream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
import time_machine

from config.settings import Settings
from plugins.manager import Plugins
from svc.billing import PaymentReads
from svc.core import Mailer, Store, TTLCache, Vault
from svc.identity import Accounts, Credentials
from svc.installs import InstallReads, Installs
from svc.orgs import Approvals, AuditLog, Governance, OrgAccess, OrgReads, Plans
from svc.runs import Runs
from svc.runtime import RuntimeReads

# The clock the tests freeze the domain at: ahead of the real one (the embedded database's
# TTL indexes then only keep documents longer), whole seconds (MongoDB keeps milliseconds).
NOW = datetime(2030, 3, 15, 12, 0, 0, tzinfo=UTC)
PUBLIC_URL = "https://svc.example.test"
ROLES = ("owner", "admin", "member")


@dataclass
class Services:
    """The governance side of the orgs package, and the store it writes."""

    store: Store
    governance: Governance
    approvals: Approvals
    plans: Plans


def build(store: Store, settings: Settings) -> Services:
    """The services as svc/wiring.py wires them (no payment provider: Plans needs none)."""
    accounts = Accounts(store)
    org_access = OrgAccess(store, accounts)
    audit = AuditLog(store)
    mailer = Mailer(store)
    governance = Governance(store, org_access, audit, mailer, PUBLIC_URL)
    orgs, installs_read, runtime = OrgReads(store), InstallReads(store), RuntimeReads(store)
    credentials = Credentials(
        store, accounts, settings.app_api_keys, TTLCache(), installs=installs_read, orgs=orgs
    )
    runs = Runs(store, installs=installs_read, runtime=runtime)
    vault = Vault(list(settings.secret_keys))
    installs = Installs(
        store,
        vault,
        Plugins(),
        credentials,
        settings,
        runs,
        governance,
        orgs=orgs,
        runtime=runtime,
        payments=PaymentReads(store),
    )
    approvals = Approvals(store, org_access, audit, mailer, governance, installs)
    return Services(store, governance, approvals, Plans(store, org_access, audit, approvals))


async def seed_orgs(store: Store) -> None:
    """Seeded straight into the store (creating orgs over HTTP needs the app): users for each
    role plus `u-mute` (no email) and `u-out` (in no org); orgs `prime` (Pro, governance on),
    `calm` (Pro, governance off), `acme` (free, governance on, as a lapsed org keeps it),
    `gone` (Pro, being deleted). Every org has an owner, an admin and a member."""
    users: list[dict[str, Any]] = [
        {"_id": f"u-{role}", "email": f"{role}@example.com", "name": role} for role in ROLES
    ]
    users += [{"_id": "u-mute", "name": "mute"}, {"_id": "u-out", "email": "out@example.com", "name": "out"}]
    await store.users.insert_many(users)
    created = datetime(2030, 1, 1, tzinfo=UTC)
    orgs = [
        ("o-pro", "prime", "Prime", "pro", True, {}),
        ("o-calm", "calm", "Calm", "pro", False, {}),
        ("o-free", "acme", "Acme", "free", True, {}),
        ("o-del", "gone", "Gone", "pro", True, {"deleting": True}),
    ]
    await store.orgs.insert_many(
        [
            {
                "_id": org_id,
                "slug": slug,
                "name": name,
                "plan": plan,
                "governanceEnabled": governed,
                "createdAt": created,
                **extra,
            }
            for org_id, slug, name, plan, governed, extra in orgs
        ]
    )
    await store.org_members.insert_many(
        [
            {"_id": f"m-{org_id}-{role}", "orgId": org_id, "userId": f"u-{role}", "role": role}
            for org_id, *_ in orgs
            for role in ROLES
        ]
    )


async def seed_waiting_install(
    store: Store, install_id: str, org_id: str, template_id: str = "t-1", **fields: Any
) -> None:
    """An org install as Installs.create leaves it under governance: provisioned, `pending`,
    `approval: "pending"` (seeded: creating one needs the app and a platform)."""
    await store.installs.insert_one(
        {
            "_id": install_id,
            "owner": {"kind": "org", "id": org_id},
            "platform": "svc",
            "templateId": template_id,
            "templateName": f"Template {template_id}",
            "status": "pending",
            "approval": "pending",
            "webhookTokenHash": f"hash-{install_id}",
            **fields,
        }
    )


async def outbox(store: Store) -> list[dict[str, Any]]:
    """The mail sent (to, subject, body, kind), by recipient then subject (ids are random and
    the clock is frozen, so nothing else orders them)."""
    docs = await store["outbox"].find({}).to_list(None)
    mails = [{k: d[k] for k in ("to", "subject", "body", "kind")} for d in docs]
    return sorted(mails, key=lambda m: (m["to"], m["subject"]))


async def audit_events(store: Store, org_id: str) -> list[dict[str, Any]]:
    """The org's audit events (action, actorId, actorEmail, meta), by action then meta."""
    docs = await store["org_audit"].find({"orgId": org_id}).to_list(None)
    events = [{k: d.get(k) for k in ("action", "actorId", "actorEmail", "meta")} for d in docs]
    return sorted(events, key=lambda e: (e["action"], repr(sorted((e["meta"] or {}).items()))))


@pytest.fixture
async def gov(store: Store, make_settings: Callable[..., Settings]) -> AsyncIterator[Services]:
    """The seeded orgs on a clock frozen at NOW: the fixture of the governance and plan rule
    tests (registered in tests/conftest.py)."""
    with time_machine.travel(NOW, tick=False):
        await seed_orgs(store)
        yield build(store, make_settings())
