"""Installs: a template deployed onto a platform through its driver plugin.

Creating an install validates every field against the platform (the plugin's `accepts` and
credential fields, then its own checks), pins the template's current version, and provisions
through the driver. Nothing is stored for an install whose provisioning failed: the driver undoes
what it created upstream and the record and its install token are removed.
"""

from __future__ import annotations

import builtins
import json
import logging
import secrets as random
from typing import Any

from pymongo import DESCENDING

from config.settings import Settings
from plugins.manager import Plugins
from plugins.types import (
    InvokeContext,
    PlatformError,
    PlatformInfo,
    PlatformInputError,
    PlatformTraits,
    ProvisionContext,
    ProvisionResult,
)
from svc.core import (
    BadGateway,
    BadRequest,
    Conflict,
    Document,
    Governance,
    Kind,
    NotFound,
    OrgLookups,
    PaymentLookups,
    RuntimeLookups,
    Store,
    Timeline,
    TimelineQuery,
    Vault,
    actor_of,
    credential_digest,
    iso,
    new_id,
    new_webhook_token,
    utcnow,
)
from svc.identity import Credentials, Principal, key_creator, require_unscoped
from svc.installs import reach
from svc.installs.abandoned import AbandonedInstalls
from svc.installs.callback_secret import rotate_callback_secret
from svc.installs.configuration import InstallConfiguration
from svc.installs.fields import (
    BILLING_FIELDS,
    CreateInstallBody,
    check_depth,
    check_payment_fields,
    check_secret_names,
    check_variables,
    interpolate,
    platform_fields,
)
from svc.installs.heartbeats import Heartbeats
from svc.installs.remembered import RememberedSecrets
from svc.installs.removal import InstallRemoval
from svc.installs.summaries import managed_summaries
from svc.mcp import Catalogue, install_warnings
from svc.runs import InvokeBody, Runs, SelfReportBody, require_ready
from svc.templates import claim_install, find_template, is_owner, owner_of, release_install

log = logging.getLogger(__name__)

MAX_LISTED = 500


class Installs(InstallConfiguration, InstallRemoval, AbandonedInstalls):
    """Create, list, configure and remove installs."""

    def __init__(
        self,
        store: Store,
        vault: Vault,
        plugins: Plugins,
        credentials: Credentials,
        settings: Settings,
        runs: Runs,
        governance: Governance | None = None,
        *,
        orgs: OrgLookups,
        runtime: RuntimeLookups,
        payments: PaymentLookups,
    ) -> None:
        self.store = store
        self.vault = vault
        self.plugins = plugins
        self.credentials = credentials
        self.settings = settings
        self.runs = runs
        self.remembered = RememberedSecrets(store, vault)
        self.heartbeats = Heartbeats(store, vault, plugins, settings.egress_allow_private)
        # Org governance (None: nothing waits for approval; the orgs package builds it) and what
        # the packages above answer (orgs, schedules, payments), all handed in by svc/wiring.py.
        self.governance = governance
        self.orgs, self.runtime, self.payments = orgs, runtime, payments

    def traits(self, platform_id: str) -> PlatformTraits:
        """How the core treats the platform's installs (defaults for a platform no longer loaded)."""
        platform = self.plugins.platform(platform_id)
        return platform.traits if platform is not None else PlatformTraits()

    def platform_ids(self, trait: str) -> list[str]:
        """The platforms with a trait set, for store queries."""
        return [p.id for p in self.plugins.platforms() if getattr(p.traits, trait)]

    async def _deployer(self, principal: Principal) -> str | None:
        """Who answers for a new install: the caller, or for an org key the member who created the
        key (as governance records the requester). An org's deletion hands an install back to its
        deployer while still a member (`Removal.hand_back`)."""
        if principal.user_id is not None or principal.key_id is None:
            return principal.user_id
        return await key_creator(self.store, principal.key_id)

    async def create(self, principal: Principal, body: CreateInstallBody) -> dict[str, Any]:
        """Validate, provision through the platform's driver, store; the spec's response."""
        require_unscoped(principal)
        platform = self._platform(body.platform)
        fields = platform_fields(platform, self.plugins.platforms(), body)
        template = await self._installable_template(principal, body.templateId)
        definition = template["definition"]
        check_depth(platform, definition)
        variables = check_variables(definition, body.variables or {})
        install_secrets = check_secret_names(body.secrets or {})
        await check_payment_fields(self.payments, body)
        company_id = body.companyId
        # A re-install into the same company (or owner, without companies) is pre-filled, a new company not.
        if "companyName" not in fields:
            prefilled = await self.remembered.prefill(owner_of(principal), company_id, definition)
            install_secrets = {**prefilled, **install_secrets}
        problems = await self.plugins.validate_install(platform.id, fields, definition)
        if problems:
            raise BadRequest("; ".join(problems))

        # The template's slot is claimed before the install exists: one conditional update on the
        # template (published only), which its delete and archive cannot interleave with.
        # (The install keeps the version and definition read above, validated together.)
        if await claim_install(self.store, template["_id"]) is None:
            await self._installable_template(principal, body.templateId)  # the answer it gives now
            raise Conflict("Template is no longer published")
        install_id = new_id()
        webhook_secret = random.token_urlsafe(24)
        now = utcnow()
        doc: Document = {
            "_id": install_id,
            "templateId": template["_id"],
            "templateName": template["name"],
            "templateSlug": template["slug"],
            "templateVersion": template["version"],
            "definition": definition,
            "platform": platform.id,
            "companyId": company_id,
            "orchABaseUrl": (fields.get("credentials") or {}).get("orchABaseUrl"),
            "status": "pending",
            "owner": owner_of(principal),
            "deployedBy": await self._deployer(principal),
            "createdByKeyId": principal.key_id,
            "variables": variables,
            "secretsEncrypted": {k: self.vault.encrypt(v) for k, v in install_secrets.items()},
            "credentialsEncrypted": self._encrypt_json(fields.get("credentials") or {}),
            "webhookSecretEncrypted": self.vault.encrypt(webhook_secret),
            "options": {
                k: fields[k]
                for k in ("model", "companyName", "adapterType", "webhookUrl", "cwd")
                if fields.get(k) is not None
            },
            **{k: getattr(body, k) for k in BILLING_FIELDS},
            "createdAt": now,
            "updatedAt": now,
        }
        try:
            await self.store.installs.insert_one(doc)
        except BaseException:
            await release_install(self.store, template["_id"])
            raise
        await self._require_live_owner(doc)
        install_token = await self.credentials.issue_install_token(install_id)
        context = ProvisionContext(
            install_id=install_id,
            platform=platform.id,
            template={
                "id": template["_id"],
                "name": template["name"],
                "slug": template["slug"],
                "version": template["version"],
            },
            definition=interpolate(definition, variables),
            credentials=fields.get("credentials") or {},
            secrets=install_secrets,
            options=doc["options"] | ({"companyId": company_id} if company_id else {}),
            install_token=install_token,
            runtime_webhook_url=f"{self.settings.base_url}/api/runtime/webhook",
            webhook_secret=webhook_secret,
            ingest_url=f"{self.settings.base_url}/api/runs/ingest",
            allow_private=self.settings.egress_allow_private,
            on_created=lambda agent: self._record_upstream(install_id, agent),
        )
        try:
            result = await self.plugins.provision(platform.id, context)
        except BaseException as exc:
            await self._forget(install_id)
            if isinstance(exc, PlatformError):
                raise platform_failure(exc) from None
            raise
        try:
            return await self._finish_install(principal, platform, doc, result, install_secrets, company_id)
        except BaseException:
            # Provisioned upstream but not recorded here (a failed write, a cancelled request):
            # remove what was made rather than leave it running and the install invisible.
            await self._abandon(doc, result.deployed_agents)
            raise

    async def _finish_install(
        self,
        principal: Principal,
        platform: PlatformInfo,
        doc: Document,
        result: ProvisionResult,
        install_secrets: dict[str, str],
        company_id: str | None,
    ) -> dict[str, Any]:
        """Record what provisioning made: the steps after the upstream call."""
        install_id = doc["_id"]
        if platform.traits.uses_secrets and install_secrets:
            await self.remembered.remember(
                owner_of(principal), company_id or result.company_id, install_secrets
            )
        gated = self.governance is not None and await self.governance.requires_approval(doc["owner"])
        update: Document = {
            "status": "pending" if gated else "completed",
            "companyId": company_id or result.company_id,
            "deployedAgents": [vars(agent) for agent in result.deployed_agents],
            "platformData": result.platform_data,
            "platformStateEncrypted": self._encrypt_json(result.state),
            "updatedAt": utcnow(),
        }
        if platform.traits.managed:
            webhook_token = new_webhook_token()
            update["webhookTokenHash"] = credential_digest(webhook_token)
            update["webhookTokenEncrypted"] = self.vault.encrypt(webhook_token)
            await self.credentials.link_key(principal, install_id)
        if gated:
            update["approval"] = "pending"
        await self.store.installs.update_one({"_id": install_id}, {"$set": update})
        approval_id = None
        if gated:
            assert self.governance is not None
            approval_id = await self.governance.request_approval({**doc, **update}, principal)
        response: dict[str, Any] = {
            "installId": install_id,
            "platform": platform.id,
            "deployedAgents": update["deployedAgents"],
            "platformData": result.platform_data,
        }
        if update["companyId"]:
            response["companyId"] = update["companyId"]
        warnings = [*result.warnings, *self._mcp_warnings(platform, doc)]  # MCP (issue 32)
        if warnings:
            response["warnings"] = warnings
        if approval_id is not None:
            response["status"] = "pending"
            response["approvalId"] = approval_id
        return response

    def _mcp_warnings(self, platform: PlatformInfo, doc: Document) -> list[str]:
        """What the install answer says about the team's MCP servers (docs/mcp.md)."""
        template = {"id": doc["templateId"], "slug": doc["templateSlug"]}
        catalogue = Catalogue(dict(self.settings.mcp_servers))
        runs, owner = platform.traits.runs_mcp, doc["owner"]
        return install_warnings(doc["definition"], platform.id, runs, catalogue, template, owner, doc["_id"])

    async def settle_approval(self, install_id: str, org_id: str, approved: bool) -> None:
        """Governance decision: a waiting install of the org becomes ready, or is cancelled."""
        waiting = {"_id": install_id, "owner.kind": "org", "owner.id": org_id, "approval": "pending"}
        now = utcnow()
        if approved:
            await self.store.installs.update_one(
                {**waiting, "status": "pending"},
                {"$set": {"status": "completed", "approval": "approved", "updatedAt": now}},
            )
            return
        rejected = await self.store.installs.find_one_and_update(
            {**waiting, "status": "pending"}, {"$set": {"approval": "rejected", "updatedAt": now}}
        )
        if rejected is None:
            return
        # A rejected deployment leaves nothing behind: its agents upstream are removed (best
        # effort: a platform that refuses is logged, the install is cancelled regardless).
        if not self.traits(rejected["platform"]).managed:
            try:
                await self._remove_upstream(rejected, remove_upstream=True)
            except BadGateway as exc:
                log.warning(
                    "upstream removal of a rejected install failed",
                    extra={"installId": install_id, "reason": exc.message},
                )
        await self.retire(rejected)

    def _platform(self, platform_id: str) -> PlatformInfo:
        platform = self.plugins.platform(platform_id)
        if platform is None:
            known = ", ".join(p.id for p in self.plugins.platforms())
            raise BadRequest(f"Unknown platform {platform_id!r}; known platforms: {known}")
        return platform

    async def _installable_template(self, principal: Principal, template_id: str) -> Document:
        template = await find_template(self.store, template_id, kind="template")
        # Someone else's draft or archived template is "not there", as GET answers (404, not 409).
        public = (
            template is not None and template["visibility"] == "public" and template["status"] == "published"
        )
        if template is None or not (public or is_owner(principal, template)):
            raise NotFound("Template not found")
        if template["status"] == "draft":
            raise Conflict("Template is not published; publish it before installing")
        if template["status"] == "archived":
            raise Conflict("Template is archived; new installs are blocked")
        return template

    async def _forget(self, install_id: str) -> None:
        """Undo a creation that did not finish: the pending record, its tokens, its template slot."""
        forgotten = await self.store.installs.find_one_and_delete({"_id": install_id}, {"templateId": 1})
        await self.credentials.revoke_install_tokens(install_id)
        if forgotten is not None:
            await release_install(self.store, forgotten["templateId"])

    async def _require_live_owner(self, doc: Document) -> None:
        """An org's install written after the org began deleting itself is undone (404): org
        deletion sets its `deleting` guard before handing installs back, and this check runs
        after our insert, so one of the two sees the other (docs/consistency.md)."""
        owner = doc["owner"]
        if owner["kind"] != "org":
            return
        if not await self.orgs.is_live(owner["id"]):
            await self._forget(doc["_id"])
            raise NotFound("Org not found")

    async def known_secrets(self, principal: Principal, company_id: str, keys: list[str]) -> list[str]:
        """The subset of `keys` the vault holds for this company (and this owner)."""
        require_unscoped(principal)
        return await self.remembered.known(owner_of(principal), company_id, keys)

    async def rotate_callback_secret(self, principal: Principal, install_id: str) -> dict[str, str]:
        """A new callback signing secret for an install the principal reaches; shown only here."""
        return await rotate_callback_secret(self.store, self.vault, await self.owned(principal, install_id))

    async def deployer_may_reach(self, user_id: str, install_id: str) -> bool:
        """Whether the user acts as the install's deployer (svc.installs.reach.deployer_reaches)."""
        doc = await self.store.installs.find_one({"_id": install_id})
        return await reach.deployer_reaches(self.orgs, user_id, doc)

    async def owned(self, principal: Principal, install_id: str) -> Document:
        """The install, if the principal reaches it (svc.installs.reach); else 404."""
        doc = await self.store.installs.find_one({"_id": install_id})
        if doc is None or not await reach.reaches(self.orgs, principal, doc):
            raise NotFound("Install not found")
        return doc

    async def list(self, principal: Principal) -> list[dict[str, Any]]:
        """The caller's installs, newest first (an install-scoped key sees its install only)."""
        read = self.store.installs.find(reach.owned_query(principal)).sort("createdAt", DESCENDING)
        docs = reach.visible(await read.to_list(MAX_LISTED + reach.PROVISIONING), MAX_LISTED)
        return [
            {
                "id": d["_id"],
                "templateId": d["templateId"],
                "templateName": d["templateName"],
                "templateSlug": d["templateSlug"],
                "templateVersion": d["templateVersion"],
                "platform": d["platform"],
                "companyId": d.get("companyId"),
                "orchABaseUrl": d.get("orchABaseUrl"),
                "status": d["status"],
                "createdAt": iso(d["createdAt"]),
            }
            for d in docs
        ]

    # `builtins.list`: below `def list`, a bare `list` in this class's annotations is that method.
    async def mine(self, user_id: str) -> builtins.list[dict[str, Any]]:
        """Managed installs the user deployed or reaches through an org, with what is missing."""
        managed = self.platform_ids("managed")
        return await managed_summaries(self.store, self.vault, managed, user_id, self.orgs, self.runtime)

    async def invoke(self, principal: Principal, install_id: str, body: InvokeBody) -> dict[str, Any]:
        """Proxy one input to an orchC team; record the run's count, tokens and outcome."""
        doc = await self.owned(principal, install_id)
        if not self.traits(doc["platform"]).invokable:
            takers = " or ".join(self.platform_ids("invokable")) or "none"
            raise BadRequest(
                f"invoke is only available for platform {takers} (this install is {doc['platform']})"
            )
        require_ready(doc)
        context = InvokeContext(
            install_id=install_id,
            platform=doc["platform"],
            credentials=self._decrypt_json(doc.get("credentialsEncrypted")),
            state=self._decrypt_json(doc.get("platformStateEncrypted")),
            input_text=body.inputText,
            session_id=body.sessionId,
            allow_private=self.settings.egress_allow_private,
        )
        deployed: builtins.list[Document] = doc.get("deployedAgents") or []
        supervisor = deployed[0].get("key") if deployed else None
        try:
            result = await self.plugins.invoke(doc["platform"], context)
        except PlatformInputError as exc:
            raise BadRequest(exc.detail) from None
        except PlatformError as exc:
            await self.runs.record(
                doc, agent_key=supervisor, status="failed", source="invoke", error_message=exc.detail
            )
            raise BadGateway(exc.detail, upstreamStatus=exc.upstream_status) from None
        run_id = await self.runs.record(
            doc,
            agent_key=supervisor,
            status="completed",
            source="invoke",
            input_tokens=result.input_tokens,
            output_tokens=result.output_tokens,
        )
        return {
            "ok": True,
            "runId": run_id,
            "sessionId": result.session_id,
            "agentName": result.agent_name,
            "text": result.text,
            "inputTokens": result.input_tokens,
            "outputTokens": result.output_tokens,
        }

    async def report_run(self, principal: Principal, install_id: str, body: SelfReportBody) -> str:
        """A run the deployer made directly on the platform (orchC self-report)."""
        doc = await self.owned(principal, install_id)
        await self.runs.require_reportable(doc, body.runId)
        require_ready(doc)
        keys = {agent["key"] for agent in doc["definition"]["agents"]}
        if body.agentKey not in keys:
            raise BadRequest(f"agentKey: no agent {body.agentKey!r} in this install")
        await self.runs.require_tokens(doc, body.inputTokens, body.outputTokens)
        return await self.runs.record(
            doc,
            agent_key=body.agentKey,
            status=body.status,
            source="self_report",
            input_tokens=body.inputTokens,
            output_tokens=body.outputTokens,
            error_message=body.errorMessage,
            run_id=body.runId,
        )

    async def timeline(
        self, principal: Principal, install_id: str, query: TimelineQuery
    ) -> tuple[builtins.list[dict[str, Any]], str | None]:
        """One page of the install's audit timeline, newest first, and the next cursor."""
        await self.owned(principal, install_id)
        return await Timeline(self.store).page({"installId": install_id}, query)

    async def _audit(
        self, principal: Principal, install_id: str, kind: Kind, action: str, meta: dict[str, Any]
    ) -> None:
        """A change to the install, on its audit timeline (names only, never a secret value)."""
        actor = actor_of(principal.user_id, principal.via)
        await Timeline(self.store).record(kind, action, install_id=install_id, actor=actor, meta=meta)

    def _encrypt_json(self, value: dict[str, Any]) -> str:
        return self.vault.encrypt(json.dumps(value))

    def _decrypt_json(self, token: str | None) -> dict[str, Any]:
        return json.loads(self.vault.decrypt(token)) if token else {}


def platform_failure(exc: PlatformError) -> BadRequest | BadGateway:
    """The caller's input refused is a 400; anything else upstream is the spec's 502."""
    if isinstance(exc, PlatformInputError):
        return BadRequest(exc.detail)
    return BadGateway(exc.detail, upstreamStatus=exc.upstream_status)
