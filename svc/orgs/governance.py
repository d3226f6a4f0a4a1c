"""Governance: on a Pro org with governance enabled, a new install waits for an owner's or
admin's approval. `Governance` is the gate installs ask (it needs no install service, so it
is built before it); `Approvals` lists and decides requests, and the install follows.
"""

from __future__ import annotations

from typing import Any

from pymongo import DESCENDING, ReturnDocument

from svc.core import BadRequest, Conflict, Document, Mailer, NotFound, Store, new_id, utcnow
from svc.identity import Principal, key_creator
from svc.installs import Installs, Upgrades, find_install, org_install_ids
from svc.orgs.access import MAX_LISTED, OrgAccess, is_pro
from svc.orgs.bodies import ApprovalDecisionBody, ApprovalRequestBody, GovernanceBody
from svc.orgs.org_audit_log import SYSTEM, Actor, AuditLog
from svc.orgs.views import approval_view, org_view


class Governance:
    """The governance port of svc.core: whether an install waits, and opening its request."""

    def __init__(
        self, store: Store, org_access: OrgAccess, audit: AuditLog, mailer: Mailer, public_url: str
    ) -> None:
        self.store = store
        self.org_access = org_access
        self.audit = audit
        self.mailer = mailer
        self.public_url = public_url

    async def requires_approval(self, owner: dict[str, str]) -> bool:
        """Governance port: a new install for this owner must wait for approval (Pro org, enabled)."""
        if owner.get("kind") != "org":
            return False
        org = await self.store.orgs.find_one({"_id": owner["id"]}, {"plan": 1, "governanceEnabled": 1})
        return org is not None and is_pro(org) and bool(org.get("governanceEnabled"))

    async def request_approval(self, install: Document, principal: Principal) -> str:
        """Governance port: the automatic request for a gated install; owners and admins are emailed."""
        requestor_id = principal.user_id
        if requestor_id is None and principal.key_id is not None:
            requestor_id = await key_creator(self.store, principal.key_id)
        actor = await self.org_access.actor_or_system(requestor_id)
        org = await self.store.orgs.find_one({"_id": install["owner"]["id"]})
        assert org is not None
        return await self.open_request(
            org, install["_id"], install["templateId"], install["templateName"], actor
        )

    async def requires_eval_suite(self, owner: dict[str, str]) -> bool:
        """Governance port: an org (Pro) that asks for it publishes only with a passing suite."""
        if owner.get("kind") != "org":
            return False
        org = await self.store.orgs.find_one({"_id": owner["id"]}, {"plan": 1, "requireEvalSuite": 1})
        return org is not None and is_pro(org) and bool(org.get("requireEvalSuite"))

    async def upgrade_approval(self, owner: dict[str, str], bump: str, widens: bool) -> str | None:
        """Governance port: why a move of an org's install waits for approval (docs/upgrades.md)."""
        if not await self.requires_approval(owner):
            return None
        if widens:
            return "it lets agents reach more than before"
        if bump == "MAJOR":
            return "it is a MAJOR (breaking) change"
        org = await self.store.orgs.find_one({"_id": owner["id"]}, {"upgradeApproval": 1})
        if (org or {}).get("upgradeApproval") == "all":
            return "the org requires approval for every version change"
        return None

    async def request_upgrade_approval(
        self, install: Document, requester_id: str | None, upgrade: dict[str, Any]
    ) -> str:
        """Governance port: the request for an install's move; owners and admins are emailed."""
        actor = await self.org_access.actor_or_system(requester_id)
        org = await self.store.orgs.find_one({"_id": install["owner"]["id"]})
        assert org is not None
        return await self.open_request(
            org, install["_id"], install["templateId"], install["templateName"], actor, upgrade=upgrade
        )

    async def record_install_event(
        self, install: Document, action: str, actor_id: str | None, meta: dict[str, Any]
    ) -> None:
        """Governance port: an org install's event in the org's audit log."""
        owner = install.get("owner") or {}
        if owner.get("kind") != "org":
            return
        actor = await self.org_access.actor_or_system(actor_id)
        await self.audit.record(owner["id"], action, actor, {"installId": install["_id"], **meta})

    async def open_request(
        self,
        org: Document,
        install_id: str,
        template_id: str,
        template_name: str,
        actor: Actor,
        upgrade: dict[str, Any] | None = None,
    ) -> str:
        doc = {
            "_id": new_id(),
            "orgId": org["_id"],
            "installId": install_id,
            "templateId": template_id,
            "templateName": template_name,
            "requestedBy": actor.id,
            "requestedByEmail": actor.email,
            "status": "pending",
            "note": None,
            "reviewedBy": None,
            "reviewedByEmail": None,
            "reviewedAt": None,
            "createdAt": utcnow(),
        }
        if upgrade is not None:  # a version move of an existing install (docs/upgrades.md)
            doc["upgrade"] = upgrade
        await self.store["org_approvals"].insert_one(doc)
        meta = {"approvalId": doc["_id"], "installId": install_id, "templateId": template_id}
        if upgrade is not None:
            meta["upgrade"] = {k: upgrade[k] for k in ("fromVersion", "toVersion", "direction", "bump")}
        await self.audit.record(org["_id"], "approval.requested", actor, meta)
        link = f"{self.public_url}/orgs/{org['slug']}/approvals"
        what = f"deploy {template_name} (install {install_id})"
        if upgrade is not None:
            what = (
                f"{'upgrade' if upgrade['direction'] == 'upgrade' else 'roll back'} {template_name} "
                f"(install {install_id}) from version {upgrade['fromVersion']} to {upgrade['toVersion']} "
                f"({upgrade['bump']}: {upgrade['reason']})"
            )
        for email in await self.org_access.manager_emails(org["_id"]):
            await self.mailer.send(
                email,
                f"{'Upgrade' if upgrade else 'Deployment'} approval requested: {template_name}",
                f"{actor.email or 'An org key'} asks to {what} in {org['name']}.\n\nReview it: {link}",
                kind="org_approval_requested",
            )
        return str(doc["_id"])


class Approvals:
    """The `org_approvals` requests: governance on/off, listing, deciding."""

    def __init__(
        self,
        store: Store,
        org_access: OrgAccess,
        audit: AuditLog,
        mailer: Mailer,
        governance: Governance,
        installs: Installs,
        upgrades: Upgrades | None = None,
    ) -> None:
        self.store = store
        self.org_access = org_access
        self.audit = audit
        self.mailer = mailer
        self.governance = governance
        self.installs = installs
        self.upgrades = upgrades  # version moves that waited for approval (svc/installs/upgrades.py)

    async def set_governance(self, user_id: str, slug: str, body: GovernanceBody) -> dict[str, Any]:
        """Turn approval of new deployments on or off."""
        access = await self.org_access.check(user_id, slug, "governance.set")
        changes: Document = {"governanceEnabled": body.enabled, "updatedAt": utcnow()}
        if body.upgradeApproval is not None:
            changes["upgradeApproval"] = body.upgradeApproval
        if body.requireEvalSuite is not None:
            changes["requireEvalSuite"] = body.requireEvalSuite
        updated = await self.store.orgs.find_one_and_update(
            {"_id": access.org["_id"]}, {"$set": changes}, return_document=ReturnDocument.AFTER
        )
        assert updated is not None
        if bool(access.org.get("governanceEnabled")) != body.enabled:
            action = "governance.enabled" if body.enabled else "governance.disabled"
            await self.audit.record(updated["_id"], action, access.actor, {})
        before = access.org.get("upgradeApproval") or "breaking"
        if body.upgradeApproval is not None and body.upgradeApproval != before:
            meta = {"upgradeApproval": body.upgradeApproval}
            await self.audit.record(updated["_id"], "governance.upgrade_approval_changed", access.actor, meta)
        required = body.requireEvalSuite
        if required is not None and required != bool(access.org.get("requireEvalSuite")):
            action = "governance.eval_suite_required" if required else "governance.eval_suite_not_required"
            await self.audit.record(updated["_id"], action, access.actor, {})
        return org_view(updated)

    async def approvals(self, user_id: str, slug: str, status: str | None) -> list[dict[str, Any]]:
        """The org's approval requests, newest first, optionally of one status."""
        access = await self.org_access.check(user_id, slug, "approvals.list")
        query: Document = {"orgId": access.org["_id"]}
        if status is not None:
            query["status"] = status
        docs = (
            await self.store["org_approvals"]
            .find(query)
            .sort([("createdAt", DESCENDING), ("_id", DESCENDING)])
            .to_list(MAX_LISTED)
        )
        return [approval_view(d) for d in docs]

    async def create_approval(self, user_id: str, slug: str, body: ApprovalRequestBody) -> dict[str, Any]:
        """A request made by hand for one of the org's installs; owners and admins are emailed."""
        access = await self.org_access.check(user_id, slug, "approvals.create")
        org_owned = {"owner.kind": "org", "owner.id": access.org["_id"]}
        fields = ("templateId", "templateName")
        install = await find_install(self.store, body.installId, *fields, where=org_owned)
        if install is None:
            raise NotFound("Install not found")
        if body.templateId != install["templateId"]:
            raise BadRequest("templateId: not the template of this install")
        # The mailed name is the install's own, not text the requester typed.
        approval_id = await self.governance.open_request(
            access.org, body.installId, install["templateId"], install["templateName"], access.actor
        )
        doc = await self.store["org_approvals"].find_one({"_id": approval_id})
        assert doc is not None
        return approval_view(doc)

    async def decide(
        self, user_id: str, slug: str, approval_id: str, body: ApprovalDecisionBody
    ) -> dict[str, Any]:
        """pending → approved or rejected (once; 409 after); the install follows; the requestor is emailed."""
        access = await self.org_access.check(user_id, slug, "approvals.decide")
        decided = await self._decide(access.org, approval_id, body.status, body.note, access.actor)
        if decided is None:
            existing = await self.store["org_approvals"].find_one(
                {"_id": approval_id, "orgId": access.org["_id"]}
            )
            if existing is None:
                raise NotFound("Approval request not found")
            raise Conflict(f"Approval request is already {existing['status']}")
        return approval_view(decided)

    async def _decide(
        self, org: Document, approval_id: str, status: str, note: str | None, actor: Actor
    ) -> Document | None:
        """Settle one pending request (None when it is not pending): install, audit, mail."""
        decided = await self.store["org_approvals"].find_one_and_update(
            {"_id": approval_id, "orgId": org["_id"], "status": "pending"},
            {
                "$set": {
                    "status": status,
                    "note": note,
                    "reviewedBy": actor.id,
                    "reviewedByEmail": actor.email,
                    "reviewedAt": utcnow(),
                }
            },
            return_document=ReturnDocument.AFTER,
        )
        if decided is None:
            return None
        if decided.get("upgrade") is not None and self.upgrades is not None:
            await self.upgrades.settle_approval(decided, status == "approved", actor.id)
        else:
            await self.installs.settle_approval(decided["installId"], org["_id"], status == "approved")
        action = "approval.approved" if status == "approved" else "approval.rejected"
        meta = {"approvalId": approval_id, "installId": decided["installId"], "note": note}
        await self.audit.record(org["_id"], action, actor, meta)
        if decided.get("requestedByEmail"):
            note_text = f"\n\nNote from the reviewer: {note}" if note else ""
            what = "Upgrade" if decided.get("upgrade") else "Deployment"
            await self.mailer.send(
                decided["requestedByEmail"],
                f"{what} {status}: {decided['templateName']}",
                f"{actor.email or 'The service'} {status} the {what.lower()} of {decided['templateName']} "
                f"(install {decided['installId']}) in {org['name']}.{note_text}",
                kind="org_approval_decided",
            )
        return decided

    async def lapse(self, org: Document) -> None:
        """Governance applies only while Pro, and deciding is a Pro action: when the plan lapses,
        the requests still waiting are approved, as new installs no longer wait."""
        pending = (
            await self.store["org_approvals"].find({"orgId": org["_id"], "status": "pending"}).to_list(None)
        )
        for request in pending:
            await self._decide(org, request["_id"], "approved", "Governance lapsed with the Pro plan", SYSTEM)

    async def cancel_waiting(self, org_id: str) -> None:
        """Nobody is left to approve the installs of an org being deleted: they are rejected."""
        for install_id in await org_install_ids(self.store, org_id, awaiting_approval=True):
            await self.installs.settle_approval(install_id, org_id, approved=False)
        if self.upgrades is not None:  # version moves waiting for approval are dropped too
            await self.upgrades.drop_pending(org_id)
