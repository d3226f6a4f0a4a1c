"""Applying a planned move of an install to another version: one transition, never half done
(docs/upgrades.md).

On the managed runtime the move is ONE conditional write of the install (its definition,
version, agents, the values sent and the history entry together), conditional on the version
it is on, with no move or approval in flight: of two moves at once one matches and the other
gets 409, and a run reads either the old install or the new one, never a mix.

On an external platform the driver changes agents upstream between two writes: a claim
(`upgrading`, the same condition, with a token and a lease) and the commit (conditional on the
token). A driver that fails undoes its own changes and the claim is released: the install
stays on its version and the error names the platform's answer. A claim left by a crashed
process expires after LEASE; the next move takes it over, knowing the agents the interrupted
attempt had created (`upgrading.created`, recorded as each was made).
"""

from __future__ import annotations

import logging
import secrets as random
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from plugins.types import DeployedAgent, PlatformError, PlatformInputError, UpgradeContext, UpgradeResult
from svc.core import (
    BadGateway,
    BadRequest,
    Conflict,
    Document,
    Governance,
    Mailer,
    ServiceError,
    Store,
    Timeline,
    actor_of,
    iso,
    utcnow,
)
from svc.identity import user_email
from svc.installs.fields import MAX_INSTALL_SECRETS, interpolate
from svc.installs.installs import Installs
from svc.installs.secret_merge import fits
from svc.installs.upgrade_plan import Plan, Target
from svc.installs.versions import MAX_HISTORY, first_entry

log = logging.getLogger(__name__)

LEASE = timedelta(minutes=10)


@dataclass(frozen=True)
class Actor:
    """Who moves the install: a user (with how they came), or the service (auto-upgrades)."""

    user_id: str | None
    via: str | None = None


@dataclass(frozen=True)
class Values:
    """Variables and secrets sent with a move (plain; secrets are encrypted when stored)."""

    variables: dict[str, str] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)


class VersionMover:
    """The transition itself, its driver call, and what is recorded and sent after it."""

    store: Store
    mailer: Mailer
    installs: Installs  # its plugins, vault, settings, credentials and remembered secrets
    governance: Governance | None

    def context(
        self,
        install: Document,
        target: Target,
        values: Values,
        *,
        dry_run: bool,
        prior: list[Document] | None = None,
        token: str | None = None,
    ) -> UpgradeContext:
        """What the driver gets: both definitions interpolated, the agents upstream, the install's
        decrypted credentials, secrets (apply only) and state."""
        svc = self.installs
        variables = {**(install.get("variables") or {}), **values.variables}
        stored = {} if dry_run else install.get("secretsEncrypted") or {}
        held = {k: svc.vault.decrypt(v) for k, v in stored.items()}
        agents = [*(install.get("deployedAgents") or []), *(prior or [])]
        secret = install.get("webhookSecretEncrypted")
        install_id = install["_id"]

        async def issue_token() -> str:
            return str(await svc.credentials.issue_install_token(install_id))

        async def created(agent: DeployedAgent) -> None:
            assert token is not None
            await self._record_created(install_id, token, agent)

        return UpgradeContext(
            install_id=install["_id"],
            platform=install["platform"],
            template={
                "id": install["templateId"],
                "name": install["templateName"],
                "slug": install["templateSlug"],
                "fromVersion": install["templateVersion"],
                "version": target.version,
            },
            current_definition=interpolate(install["definition"], variables),
            definition=interpolate(target.definition, variables),
            deployed_agents=tuple(
                DeployedAgent(key=a["key"], externalId=a["externalId"], name=a.get("name") or a["key"])
                for a in agents
            ),
            credentials=svc._decrypt_json(install.get("credentialsEncrypted")),
            secrets={**held, **values.secrets},
            options={
                **(install.get("options") or {}),
                **({"companyId": install["companyId"]} if install.get("companyId") else {}),
            },
            state=svc._decrypt_json(install.get("platformStateEncrypted")),
            runtime_webhook_url=f"{svc.settings.base_url}/api/runtime/webhook",
            webhook_secret=svc.vault.decrypt(secret) if secret and not dry_run else "",
            ingest_url=f"{svc.settings.base_url}/api/runs/ingest",
            dry_run=dry_run,
            allow_private=svc.settings.egress_allow_private,
            issue_install_token=None if dry_run else issue_token,
            on_created=None if token is None else created,
        )

    async def apply(
        self, install: Document, plan: Plan, values: Values, actor: Actor, request_id: str | None = None
    ) -> dict[str, Any]:
        """Move the install as planned (after every check passed): the transition, then the
        timeline, the org's audit log and the deployer's mail. `request_id`: the approved request."""
        held = set(install.get("secretsEncrypted") or {})
        if len(held | set(values.secrets)) > MAX_INSTALL_SECRETS:
            raise BadRequest(f"secrets: an install holds at most {MAX_INSTALL_SECRETS} names")
        guard: Document = {
            "_id": install["_id"],
            "status": "completed",
            "templateVersion": install["templateVersion"],
        }
        if request_id is not None:
            guard["pendingUpgrade.id"] = request_id
        else:
            guard["pendingUpgrade"] = None
        if self.installs.traits(install["platform"]).managed:
            result = await self.installs.plugins.upgrade(
                install["platform"], self.context(install, plan.target, values, dry_run=False)
            )
            # The secret cap is counted on the server in the same write, as a merge counts it
            # (svc/installs/secret_merge.py): a merge racing the move cannot take it past the cap.
            capped = fits(sorted(values.secrets)) if values.secrets else {}
            done = await self.store.installs.update_one(
                {**guard, "upgrading": None, **capped}, self._commit(install, plan, values, result, actor)
            )
            if not done.matched_count:
                raise await self.conflict(install["_id"], values)
        else:
            result = await self._upstream(install, plan, values, actor, guard)
        if self.installs.traits(install["platform"]).uses_secrets and values.secrets:
            remembered = self.installs.remembered
            await remembered.remember(install["owner"], install.get("companyId"), values.secrets)
        return await self._announce(install, plan, values, result, actor)

    async def _upstream(
        self, install: Document, plan: Plan, values: Values, actor: Actor, guard: Document
    ) -> UpgradeResult:
        """Claim, let the driver change the agents, commit; release the claim when it fails."""
        now = utcnow()
        token = random.token_hex(12)
        claim = {
            "token": token,
            "toVersion": plan.target.version,
            "startedAt": now,
            "leaseUntil": now + LEASE,
            "created": [],
        }
        before = await self.store.installs.find_one_and_update(
            {**guard, "$or": [{"upgrading": None}, {"upgrading.leaseUntil": {"$lte": now}}]},
            {"$set": {"upgrading": claim}},
        )
        if before is None:
            raise await self.conflict(install["_id"])
        prior = list((before.get("upgrading") or {}).get("created") or [])
        platform = install["platform"]
        try:
            result = await self.installs.plugins.upgrade(
                platform, self.context(install, plan.target, values, dry_run=False, prior=prior, token=token)
            )
        except PlatformInputError as exc:
            await self._release(install["_id"], token)
            raise BadRequest(exc.detail) from None
        except PlatformError as exc:
            await self._release(install["_id"], token)
            raise BadGateway(
                f"{platform} refused the change: {exc.detail}; the install stays on version "
                f"{install['templateVersion']}",
                upstreamStatus=exc.upstream_status,
            ) from None
        except BaseException:
            await self._release(install["_id"], token)
            raise
        if not result.supported:
            await self._release(install["_id"], token)
            raise Conflict(
                f"{result.reason or 'The platform cannot make this change in place'}; the install stays "
                f"on version {install['templateVersion']}"
            )
        committed = await self.store.installs.update_one(
            {"_id": install["_id"], "status": "completed", "upgrading.token": token},
            self._commit(install, plan, values, result, actor),
        )
        if not committed.matched_count:
            log.error(
                "an upgrade changed the agents upstream but lost its claim before recording it",
                extra={"installId": install["_id"], "toVersion": plan.target.version},
            )
            raise Conflict("The install changed while its agents were being updated; review it and try again")
        return result

    def _commit(
        self, install: Document, plan: Plan, values: Values, result: UpgradeResult, actor: Actor
    ) -> Document:
        """The one update that moves the install (and ends any claim or approved request)."""
        now = utcnow()
        target = plan.target
        entry = {
            "version": target.version,
            "semver": target.semver,
            "action": plan.direction,
            "fromVersion": install["templateVersion"],
            "bump": plan.bump,
            "actorId": actor.user_id,
            "via": actor.via,
            "at": now,
        }
        earlier = [] if install.get("versionHistory") else [first_entry(install)]
        changes: Document = {
            "definition": target.definition,
            "templateVersion": target.version,
            "templateSemver": target.semver,
            "previousVersion": install["templateVersion"],
            # The version left stays on the install: its runs still in flight run it, and a
            # rollback finds it even without the template's snapshot.
            "retained": {
                "version": install["templateVersion"],
                "semver": plan.current_semver,
                "definition": install["definition"],
            },
            "updatedAt": now,
            **{f"variables.{k}": v for k, v in values.variables.items()},
            **{f"secretsEncrypted.{k}": self.installs.vault.encrypt(v) for k, v in values.secrets.items()},
        }
        if result.deployed_agents is not None:
            changes["deployedAgents"] = [vars(agent) for agent in result.deployed_agents]
        if result.state is not None:
            changes["platformStateEncrypted"] = self.installs._encrypt_json(result.state)
        if result.platform_data is not None:
            changes["platformData"] = result.platform_data
        update: Document = {
            "$set": changes,
            "$unset": {"upgrading": "", "pendingUpgrade": ""},
            "$push": {"versionHistory": {"$each": [*earlier, entry], "$slice": -MAX_HISTORY}},
        }
        return update

    async def _release(self, install_id: str, token: str) -> None:
        await self.store.installs.update_one(
            {"_id": install_id, "upgrading.token": token}, {"$unset": {"upgrading": ""}}
        )

    async def _record_created(self, install_id: str, token: str, agent: DeployedAgent) -> None:
        """An agent the driver just created upstream, kept with the claim: an attempt that dies
        before its commit leaves it known to the next one (which updates it, or undoes it)."""
        await self.store.installs.update_one(
            {"_id": install_id, "upgrading.token": token}, {"$push": {"upgrading.created": vars(agent)}}
        )

    async def conflict(self, install_id: str, values: Values | None = None) -> ServiceError:
        """Why a move found the install other than it planned (read after the write missed)."""
        now = await self.store.installs.find_one({"_id": install_id})
        if now is None or now["status"] == "cancelled":
            return Conflict("Install is cancelled")
        if values is not None and len(set(now.get("secretsEncrypted") or {}) | set(values.secrets)) > (
            MAX_INSTALL_SECRETS
        ):
            return BadRequest(f"secrets: an install holds at most {MAX_INSTALL_SECRETS} names")
        if now["status"] != "completed":
            return Conflict(f"Install is not ready (status: {now['status']})")
        if now.get("pendingUpgrade"):
            return Conflict(
                f"A change to version {now['pendingUpgrade']['toVersion']} awaits the org's approval"
            )
        if now.get("upgrading"):
            return Conflict("Another version change of this install is in progress; try again shortly")
        return Conflict(
            f"The install is now on version {now['templateVersion']}; review the plan again",
            currentVersion=now["templateVersion"],
        )

    async def _announce(
        self, install: Document, plan: Plan, values: Values, result: UpgradeResult, actor: Actor
    ) -> dict[str, Any]:
        """Timeline, org audit log and the deployer's mail after a move; the answer."""
        action = "install.upgraded" if plan.direction == "upgrade" else "install.rolled_back"
        meta = {
            "fromVersion": install["templateVersion"],
            "toVersion": plan.target.version,
            "toSemver": plan.target.semver,
            "bump": plan.bump,
            "widenedPermissions": plan.widened,
            "variablesSet": sorted(values.variables) or None,
            "secretsSet": sorted(values.secrets) or None,  # names only, never a value
            "warnings": list(result.warnings) or None,
        }
        meta = {k: v for k, v in meta.items() if v is not None}
        await Timeline(self.store).record(
            "version", action, install_id=install["_id"], actor=actor_of(actor.user_id, actor.via), meta=meta
        )
        if self.governance is not None:
            await self.governance.record_install_event(install, action, actor.user_id, meta)
        await self.mail_deployer(install, *self._mail(install, plan, result), kind=action)
        return {
            "installId": install["_id"],
            "status": "upgraded" if plan.direction == "upgrade" else "rolled_back",
            "fromVersion": install["templateVersion"],
            "toVersion": plan.target.version,
            "semver": plan.target.semver,
            "bump": plan.bump,
            "deployedAgents": [vars(a) for a in result.deployed_agents]
            if result.deployed_agents is not None
            else install.get("deployedAgents") or [],
            "warnings": list(result.warnings),
            "at": iso(utcnow()),
        }

    def _mail(self, install: Document, plan: Plan, result: UpgradeResult) -> tuple[str, str]:
        moved = "upgraded" if plan.direction == "upgrade" else "rolled back"
        target = f"version {plan.target.version}" + (f" ({plan.target.semver})" if plan.target.semver else "")
        subject = f"{install['templateName']} was {moved} to {target}"
        logs = "\n".join(
            f"- {e['semver'] or e['version']}: {e['changeLog'] or '(no change log)'}"
            for e in plan.change_logs
        )
        body = (
            f"Your install {install['_id']} of {install['templateName']} was {moved} from version "
            f"{install['templateVersion']} to {target} ({plan.bump}).\n\n"
            + (f"Changes:\n{logs}\n\n" if logs else "")
            + ("Warnings:\n" + "\n".join(result.warnings) + "\n\n" if result.warnings else "")
            + "Runs already started finish on the version they started on. To go back, use the "
            f"install's Versions tab or POST /api/installs/{install['_id']}/rollback."
        )
        return subject, body

    async def mail_deployer(self, install: Document, subject: str, body: str, kind: str) -> None:
        """Mail the install's deployer (the deploying account, else the billing email given)."""
        email = await user_email(self.store, install.get("deployedBy")) or install.get("deployerEmail")
        if email:
            await self.mailer.send(email, subject, body, kind=kind)
