"""Moving installs between versions of their template: what is available, the plan, applying
it (or asking the org's approval first), rolling back, and opting into automatic upgrades
(docs/upgrades.md). The transition itself is in svc/installs/upgrade_apply.py.
"""

from __future__ import annotations

import logging
from typing import Any

from plugins.types import PlatformError, UpgradeResult
from svc.core import (
    BadRequest,
    Conflict,
    Document,
    Governance,
    Mailer,
    ServiceError,
    Store,
    Timeline,
    actor_of,
    new_id,
    utcnow,
)
from svc.identity import Principal, require_unscoped
from svc.installs.fields import check_depth, check_secret_names
from svc.installs.installs import Installs
from svc.installs.upgrade_apply import Actor, Values, VersionMover
from svc.installs.upgrade_plan import (
    AutoUpgradeBody,
    Direction,
    Plan,
    UpgradeBody,
    acceptance_refusal,
    change_logs,
    check_values,
    classify,
    missing_values,
    platform_section,
    pricing,
    refusal,
    resolve_target,
)
from svc.installs.versions import availability, semver_of

log = logging.getLogger(__name__)

MAX_ORG_SECRETS = 500


class Upgrades(VersionMover):
    """The deployer's side of versions: read, plan, move, roll back, settle approvals."""

    def __init__(
        self, store: Store, installs: Installs, mailer: Mailer, governance: Governance | None = None
    ) -> None:
        self.store = store
        self.installs = installs
        self.mailer = mailer
        self.governance = governance

    # ---- reading ------------------------------------------------------------------------

    async def versions(self, principal: Principal, install_id: str) -> dict[str, Any]:
        """The install's version, the newest it can move to (with its class for this install and
        the change logs in between), its history and its automatic-upgrade setting."""
        install = await self.installs.owned(principal, install_id)
        variables, secrets = await self._held(install)
        if secrets is None:  # a platform that takes no secrets: none is ever missing
            secrets = set(install["definition"].get("requiredSecrets") or [])
        return await availability(self.store, install, variables, secrets)

    # ---- moving -------------------------------------------------------------------------

    async def move(
        self, principal: Principal, install_id: str, body: UpgradeBody, direction: Direction
    ) -> dict[str, Any]:
        """Plan (dryRun), or check and apply the move, or open the org's approval request when
        governance asks for one (the answer's `status` is then `pending_approval`)."""
        install = await self.installs.owned(principal, install_id)
        plan = await self.plan(install, body, direction)
        if body.dryRun:
            return {"dryRun": True, "plan": plan.view()}
        require_unscoped(principal)
        refused = refusal(plan) or acceptance_refusal(plan, body.acceptPermissions)
        if refused is not None:
            raise refused
        values = Values(dict(body.variables or {}), dict(body.secrets or {}))
        # An org key acts for the member who created it, as for a new install's approval.
        actor = Actor(await self.installs._deployer(principal), principal.via)
        if plan.approval_reason is not None:
            return await self._request_approval(install, plan, values, actor)
        return await self.apply(install, plan, values, actor)

    async def plan(self, install: Document, body: UpgradeBody, direction: Direction) -> Plan:
        """The plan of moving `install` as `body` asks, from the install as it is now."""
        target = await resolve_target(self.store, install, body, direction)
        info = self.installs.plugins.platform(install["platform"])
        traits = self.installs.traits(install["platform"])
        takes_secrets = traits.secrets_updatable or (info is not None and "secrets" in info.accepts)
        check_values(body, target.definition, takes_secrets)
        check_secret_names(dict(body.secrets or {}))
        # The class is the install's as it stands (values sent with the move are new inputs it
        # did not have: still breaking); what is missing counts the values sent.
        variables, secrets = await self._held(install)
        bump, reasons, permissions = classify(install, target, variables, secrets)
        variables |= set(body.variables or {})
        if secrets is not None:
            secrets |= set(body.secrets or {})
        missing_vars, missing_secrets = missing_values(target.definition, variables, secrets)
        problems: list[str] = []
        if info is not None:
            try:
                check_depth(info, target.definition)
            except BadRequest as exc:
                problems.append(exc.message)
            # As a credentials change re-checks them: the company exists now (its id, not a name).
            options = {k: v for k, v in (install.get("options") or {}).items() if k != "companyName"}
            fields = {
                **options,
                "credentials": self.installs._decrypt_json(install.get("credentialsEncrypted")),
                "companyId": install.get("companyId") or "-",
            }
            if info.credential_fields or fields["credentials"]:
                problems += await self.installs.plugins.validate_install(info.id, fields, target.definition)
        try:
            result = await self.installs.plugins.upgrade(
                install["platform"], self.context(install, target, Values(), dry_run=True)
            )
        except PlatformError as exc:  # the driver refuses the target (an unknown model): a problem
            problems.append(exc.detail)
            result = UpgradeResult(changes=())
        widened = any(change["widened"] for change in permissions)
        approval = (
            await self.governance.upgrade_approval(install["owner"], bump, widened)
            if self.governance is not None
            else None
        )
        return Plan(
            install=install,
            direction=direction,
            current_semver=await semver_of(self.store, install),
            target=target,
            bump=bump,
            reasons=reasons,
            permissions=permissions,
            missing_variables=missing_vars,
            missing_secrets=missing_secrets,
            platform=platform_section(install["platform"], traits.managed, result, target.version),
            platform_result=result,
            change_logs=await change_logs(self.store, install, target),
            pricing=await pricing(self.store, install, target, utcnow()),
            approval_reason=approval,
            problems=problems,
        )

    async def _held(self, install: Document) -> tuple[set[str], set[str] | None]:
        """The variable and secret names the install holds; secrets None on a platform that
        takes none. Org secrets count on the managed runtime, which injects them at run time."""
        variables = set(install.get("variables") or {})
        info = self.installs.plugins.platform(install["platform"])
        traits = self.installs.traits(install["platform"])
        if not (traits.secrets_updatable or (info is not None and "secrets" in info.accepts)):
            return variables, None
        secrets = set(install.get("secretsEncrypted") or {})
        owner = install.get("owner") or {}
        if traits.managed and owner.get("kind") == "org":
            # Names only, read as the deployer's home list reads them (svc/installs/summaries.py).
            names = await self.installs.orgs.secret_names([owner["id"]], MAX_ORG_SECRETS)
            secrets |= names.get(owner["id"], set())
        return variables, secrets

    # ---- approvals ----------------------------------------------------------------------

    async def _request_approval(
        self, install: Document, plan: Plan, values: Values, actor: Actor
    ) -> dict[str, Any]:
        """Hold the move until an owner or admin decides (the existing approval flow and mail)."""
        assert self.governance is not None and plan.approval_reason is not None
        request_id = new_id()
        pending = {
            "id": request_id,
            "fromVersion": install["templateVersion"],
            "toVersion": plan.target.version,
            "direction": plan.direction,
            "bump": plan.bump,
            "acceptance": plan.acceptance,
            "variables": values.variables,
            "secretsEncrypted": {k: self.installs.vault.encrypt(v) for k, v in values.secrets.items()},
            "requestedBy": actor.user_id,
            "requestedAt": utcnow(),
            "approvalId": None,
        }
        held = await self.store.installs.update_one(
            {
                "_id": install["_id"],
                "status": "completed",
                "templateVersion": install["templateVersion"],
                "pendingUpgrade": None,
                "upgrading": None,
            },
            {"$set": {"pendingUpgrade": pending}},
        )
        if not held.matched_count:
            raise await self.conflict(install["_id"])
        upgrade = {
            "requestId": request_id,
            "fromVersion": install["templateVersion"],
            "toVersion": plan.target.version,
            "direction": plan.direction,
            "bump": plan.bump,
            "reason": plan.approval_reason,
        }
        try:
            approval_id = await self.governance.request_upgrade_approval(install, actor.user_id, upgrade)
        except BaseException:
            await self._drop_request(install["_id"], request_id)
            raise
        await self.store.installs.update_one(
            {"_id": install["_id"], "pendingUpgrade.id": request_id},
            {"$set": {"pendingUpgrade.approvalId": approval_id}},
        )
        meta = {**{k: v for k, v in upgrade.items() if k != "requestId"}, "approvalId": approval_id}
        await Timeline(self.store).record(
            "version", "install.upgrade_requested", install_id=install["_id"],
            actor=actor_of(actor.user_id, actor.via), meta=meta,
        )
        return {"status": "pending_approval", "approvalId": approval_id, "plan": plan.view()}

    async def settle_approval(self, approval: Document, approved: bool, reviewer_id: str | None) -> None:
        """An owner's or admin's decision on a held move (called by svc.orgs.Approvals): apply it
        with the values held for it, or drop it. A move that can no longer apply is dropped,
        recorded on the timeline and mailed to the deployer."""
        request_id = approval["upgrade"]["requestId"]
        install = await self.store.installs.find_one(
            {"_id": approval["installId"], "pendingUpgrade.id": request_id}
        )
        if install is None:
            return
        pending = install["pendingUpgrade"]
        meta = {"approvalId": approval["_id"], "toVersion": pending["toVersion"], "reviewerId": reviewer_id}
        if not approved:
            await self._drop_request(install["_id"], request_id)
            await Timeline(self.store).record(
                "version", "install.upgrade_rejected", install_id=install["_id"],
                actor=actor_of(reviewer_id), meta=meta,
            )
            return
        vault = self.installs.vault
        secrets = {k: vault.decrypt(v) for k, v in (pending.get("secretsEncrypted") or {}).items()}
        values = Values(dict(pending.get("variables") or {}), secrets)
        body = UpgradeBody(
            version=pending["toVersion"], variables=values.variables or None, secrets=secrets or None
        )
        try:
            plan = await self.plan(install, body, pending["direction"])
            refused = refusal(plan)
            if refused is None and plan.widened and plan.acceptance != pending.get("acceptance"):
                refused = Conflict("The permission changes differ from those accepted when it was asked for")
            if refused is not None:
                raise refused
            await self.apply(install, plan, values, Actor(pending.get("requestedBy"), "approval"), request_id)
        except ServiceError as exc:
            await self._drop_request(install["_id"], request_id)
            await Timeline(self.store).record(
                "version", "install.upgrade_failed", install_id=install["_id"],
                actor=actor_of(reviewer_id), meta={**meta, "reason": exc.message},
            )
            await self.mail_deployer(
                install,
                f"{install['templateName']}: the approved version change could not be applied",
                f"The change of install {install['_id']} to version {pending['toVersion']} was approved "
                f"but could not be applied: {exc.message}\n\nReview the plan on the install's Versions tab.",
                kind="install.upgrade_failed",
            )

    async def _drop_request(self, install_id: str, request_id: str) -> None:
        await self.store.installs.update_one(
            {"_id": install_id, "pendingUpgrade.id": request_id}, {"$unset": {"pendingUpgrade": ""}}
        )

    async def drop_pending(self, org_id: str) -> None:
        """An org being deleted leaves nobody to approve its installs' held moves: they are dropped."""
        await self.store.installs.update_many(
            {"owner.kind": "org", "owner.id": org_id, "pendingUpgrade": {"$ne": None}},
            {"$unset": {"pendingUpgrade": ""}},
        )

    # ---- automatic upgrades ---------------------------------------------------------------

    async def set_auto(self, principal: Principal, install_id: str, body: AutoUpgradeBody) -> dict[str, Any]:
        """Opt the install into automatic PATCH (or PATCH and MINOR) upgrades, or out."""
        install = await self.installs.owned(principal, install_id)
        require_unscoped(principal)
        if install["status"] == "cancelled":
            raise Conflict("Install is cancelled")
        await self.store.installs.update_one(
            {"_id": install_id}, {"$set": {"autoUpgrade.mode": body.mode, "updatedAt": utcnow()}}
        )
        if (install.get("autoUpgrade") or {}).get("mode", "off") != body.mode:
            await Timeline(self.store).record(
                "version", "install.auto_upgrade_set", install_id=install_id,
                actor=actor_of(principal.user_id, principal.via), meta={"mode": body.mode},
            )
        return {"installId": install_id, "autoUpgrade": body.mode}
