"""Installs: a template deployed onto a platform through its driver plugin.

Creating an install validates every field against the platform (the plugin's
`accepts` and credential fields, then its own checks), pins the template's
current version, and provisions through the driver. Nothing is stored for an
install whose provisioning failed: the driver undoes what it created upstream
and the record and its install token are removed.
"""

from __future__ import annotations

import json
import logging
import re
import secrets as random
from typing import Any

from pydantic import Field
from pymongo import DESCENDING

from config.settings import Settings
from plugins.manager import Plugins
from plugins.types import (
    OPTIONAL_FIELDS,
    DeployedAgent,
    DeprovisionContext,
    InvokeContext,
    PlatformError,
    PlatformInfo,
    ProvisionContext,
)
from svc.core import (
    BadGateway,
    BadRequest,
    Conflict,
    Document,
    Governance,
    NotFound,
    RequestBody,
    Store,
    TTLCache,
    Vault,
    iso,
    tokens,
    utcnow,
)
from svc.identity import Credentials, Principal, require_unscoped
from svc.runs import InvokeBody, Runs, SelfReportBody, require_ready
from svc.templates import VARIABLE_REFERENCE, is_owner, owner_of

log = logging.getLogger(__name__)

SECRET_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
MAX_LISTED = 500
BILLING_FIELDS = ("deployerEmail", "payCustomerId", "payPaymentMethodId")
# Status `pending` means provisioning, except on an install waiting for governance approval
# (`approval: "pending"`, provisioned and listed, but not ready for runs until approved).
VISIBLE: Document = {"$or": [{"status": {"$ne": "pending"}}, {"approval": "pending"}]}


def is_visible(doc: Document) -> bool:
    """False while provisioning (a governance-pending install is visible)."""
    return doc.get("status") != "pending" or doc.get("approval") == "pending"


class CreateInstallBody(RequestBody):
    """POST /api/installs."""

    templateId: str = Field(min_length=1, max_length=64)
    platform: str = Field(default="orchA", max_length=64)
    credentials: dict[str, str] | None = None
    variables: dict[str, str] | None = None
    secrets: dict[str, str] | None = None
    model: str | None = Field(default=None, max_length=100)
    companyId: str | None = Field(default=None, max_length=200)
    companyName: str | None = Field(default=None, max_length=200)
    adapterType: str | None = Field(default=None, max_length=50)
    webhookUrl: str | None = Field(default=None, max_length=2048)
    cwd: str | None = Field(default=None, max_length=1024)
    orchABaseUrl: str | None = Field(default=None, max_length=2048)
    orchAApiKey: str | None = Field(default=None, max_length=1024)
    deployerEmail: str | None = Field(default=None, max_length=254)
    payCustomerId: str | None = Field(default=None, max_length=200)
    payPaymentMethodId: str | None = Field(default=None, max_length=200)


def interpolate(definition: dict[str, Any], variables: dict[str, str]) -> dict[str, Any]:
    """The definition with `{{name}}` replaced in every prompt where a value is known."""

    def fill(match: re.Match[str]) -> str:
        return variables.get(match.group(1), match.group(0))

    agents = [
        {**agent, "prompt": VARIABLE_REFERENCE.sub(fill, agent.get("prompt", ""))}
        for agent in definition["agents"]
    ]
    return {**definition, "agents": agents}


def unwrap(body: Any, wrapper: str) -> dict[str, str]:
    """A flat object or `{wrapper: {...}}`, checked to be names mapped to strings."""
    if not isinstance(body, dict):
        raise BadRequest("Request body must be a JSON object")
    if set(body) == {wrapper} and isinstance(body[wrapper], dict):
        body = body[wrapper]
    if not body:
        raise BadRequest(f"No {wrapper} given")
    for name, value in body.items():
        if not isinstance(value, str):
            raise BadRequest(f"{wrapper}.{name}: must be a string")
        if len(value) > 65_536:
            raise BadRequest(f"{wrapper}.{name}: longer than 65536 characters")
    return dict(body)


class Installs:
    """Create, list, configure and remove installs."""

    def __init__(
        self,
        store: Store,
        vault: Vault,
        plugins: Plugins,
        credentials: Credentials,
        key_cache: TTLCache[str, Principal],
        settings: Settings,
        runs: Runs,
    ) -> None:
        self.store = store
        self.vault = vault
        self.plugins = plugins
        self.credentials = credentials
        self.key_cache = key_cache
        self.settings = settings
        self.runs = runs
        # Set once the org service exists (svc.services); None means no governance gating.
        self.governance: Governance | None = None

    # ---- creating --------------------------------------------------------------------

    async def create(self, principal: Principal, body: CreateInstallBody) -> dict[str, Any]:
        """Validate, provision through the platform's driver, store; the spec's response."""
        require_unscoped(principal)
        platform = self._platform(body.platform)
        fields = self._platform_fields(platform, body)
        template = await self._installable_template(principal, body.templateId)
        definition = template["definition"]
        variables = self._check_variables(definition, body.variables or {})
        install_secrets = self._check_secret_names(body.secrets or {})
        await self._check_payment_fields(body)
        company_id = body.companyId
        # A re-install into the same company (or, without companies, by the same owner) is pre-filled;
        # a company created by this install starts empty.
        if "companyName" not in fields:
            prefilled = await self._vault_prefill(principal, company_id, definition)
            install_secrets = {**prefilled, **install_secrets}
        problems = await self.plugins.validate_install(platform.id, fields, definition)
        if problems:
            raise BadRequest("; ".join(problems))

        install_id = tokens.new_id()
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
            "deployedBy": principal.user_id,
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
        await self.store.installs.insert_one(doc)
        # A template archived or deleted since we read it takes no new install (its delete
        # counted active installs before this pending one existed).
        if not await self.store["templates"].count_documents({"_id": template["_id"], "status": "published"}):
            await self._forget(install_id)
            raise Conflict("Template is no longer published")
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
            runtime_webhook_url=f"{self.settings.public_url}/api/runtime/webhook",
            webhook_secret=webhook_secret,
            ingest_url=f"{self.settings.public_url}/api/runs/ingest",
            allow_private=self.settings.egress_allow_private,
        )
        try:
            result = await self.plugins.provision(platform.id, context)
        except BaseException as exc:
            await self._forget(install_id)
            if isinstance(exc, PlatformError):
                raise BadGateway(exc.detail, upstreamStatus=exc.upstream_status) from None
            raise
        if platform.id in ("svc", "orchA", "orchC") and install_secrets:
            await self._remember_secrets(principal, company_id or result.company_id, install_secrets)
        gated = self.governance is not None and await self.governance.requires_approval(doc["owner"])
        update: Document = {
            "status": "pending" if gated else "completed",
            "companyId": company_id or result.company_id,
            "deployedAgents": [vars(agent) for agent in result.deployed_agents],
            "platformData": result.platform_data,
            "platformStateEncrypted": self._encrypt_json(result.state),
            "updatedAt": utcnow(),
        }
        if platform.id == "svc":
            webhook_token = tokens.new_webhook_token()
            update["webhookTokenHash"] = tokens.digest(webhook_token)
            update["webhookTokenEncrypted"] = self.vault.encrypt(webhook_token)
            await self._link_key(principal, install_id)
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
        if result.warnings:
            response["warnings"] = list(result.warnings)
        if approval_id is not None:
            response["status"] = "pending"
            response["approvalId"] = approval_id
        return response

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
        if rejected["platform"] != "svc":
            try:
                await self._remove_upstream(rejected, remove_upstream=True)
            except BadGateway as exc:
                log.warning(
                    "upstream removal of a rejected install failed",
                    extra={"installId": install_id, "reason": exc.message},
                )
        await self.retire(rejected)

    async def _check_payment_fields(self, body: CreateInstallBody) -> None:
        """A customer must be one our setup-intent created, for the deployer's email: nobody
        bills their usage to a customer id they happened to learn."""
        if body.payPaymentMethodId is not None and body.payCustomerId is None:
            raise BadRequest("payPaymentMethodId needs payCustomerId")
        if body.payCustomerId is None:
            return
        customer = await self.store["pay_customers"].find_one({"_id": body.payCustomerId})
        if customer is None:
            raise BadRequest("payCustomerId: unknown customer; create one with POST /api/stripe/setup-intent")
        if (body.deployerEmail or "").strip().lower() != customer["email"]:
            raise BadRequest("deployerEmail must be the email the payment customer was created for")

    def _platform(self, platform_id: str) -> PlatformInfo:
        platform = self.plugins.platform(platform_id)
        if platform is None:
            known = ", ".join(p.id for p in self.plugins.platforms())
            raise BadRequest(f"Unknown platform {platform_id!r}; known platforms: {known}")
        return platform

    def _platform_fields(self, platform: PlatformInfo, body: CreateInstallBody) -> dict[str, Any]:
        """The optional fields sent, each checked against what the platform accepts."""
        sent = {name for name in body.model_fields_set if getattr(body, name) is not None}
        credentials = dict(body.credentials or {})
        for top_level in ("orchABaseUrl", "orchAApiKey"):
            if top_level in sent:
                if platform.id != "orchA" or "companyName" not in sent:
                    raise BadRequest(
                        f"{top_level} is only valid at the top level for platform orchA with companyName"
                    )
                credentials.setdefault(top_level, getattr(body, top_level))
                sent.add("credentials")
        fields: dict[str, Any] = {}
        for name in OPTIONAL_FIELDS:
            if name not in sent:
                continue
            if name not in platform.accepts:
                takers = [p.id for p in self.plugins.platforms() if name in p.accepts]
                where = f"platform {' or '.join(takers)}" if takers else "no platform"
                raise BadRequest(f"{name} is only valid for {where} (not {platform.id})")
            fields[name] = credentials if name == "credentials" else getattr(body, name)
        if platform.credential_fields or "credentials" in fields:
            self._check_credentials(platform, credentials)
            fields["credentials"] = credentials
        return fields

    @staticmethod
    def _check_credentials(platform: PlatformInfo, credentials: dict[str, str]) -> None:
        known = {field.key for field in platform.credential_fields}
        for name in credentials:
            if name not in known:
                raise BadRequest(f"credentials.{name} is not a credential of platform {platform.id}")
        for field in platform.credential_fields:
            if field.required and not credentials.get(field.key, "").strip():
                raise BadRequest(f"credentials.{field.key} is required for platform {platform.id}")

    async def _installable_template(self, principal: Principal, template_id: str) -> Document:
        template = await self.store["templates"].find_one({"_id": template_id, "kind": "template"})
        public = template is not None and template["visibility"] == "public" and template["status"] != "draft"
        if template is None or not (public or is_owner(principal, template)):
            raise NotFound("Template not found")
        if template["status"] == "draft":
            raise Conflict("Template is not published; publish it before installing")
        if template["status"] == "archived":
            raise Conflict("Template is archived; new installs are blocked")
        return template

    @staticmethod
    def _check_variables(definition: dict[str, Any], variables: dict[str, str]) -> dict[str, str]:
        declared = set(definition.get("requiredVariables") or [])
        for name in variables:
            if name not in declared:
                raise BadRequest(f"variables.{name} is not a required variable of this template")
        return variables

    @staticmethod
    def _check_secret_names(values: dict[str, str]) -> dict[str, str]:
        for name in values:
            if not SECRET_NAME.fullmatch(name):
                raise BadRequest(f"secrets.{name}: not a valid secret name (letters, digits, _)")
        return values

    async def _forget(self, install_id: str) -> None:
        await self.store.installs.delete_one({"_id": install_id})
        await self.store.install_tokens.delete_many({"installId": install_id})

    async def _link_key(self, principal: Principal, install_id: str) -> None:
        """Link the creating personal key to the new install (spec: so whoami resolves); the key
        keeps every right it had: only a key created with `installId` is restricted (docs/auth.md).
        Org keys are shared by the org and are not linked (docs/orgs.md)."""
        if principal.via != "key" or principal.key_id is None or principal.org_id is not None:
            return
        doc = await self.store.api_keys.find_one_and_update(
            {"_id": principal.key_id}, {"$set": {"linkedInstallId": install_id}}
        )
        if doc is not None:
            self.key_cache.discard(doc["keyHash"])

    # ---- the vault -------------------------------------------------------------------

    @staticmethod
    def _scope(principal: Principal, company_id: str | None) -> dict[str, Any]:
        return {"owner": owner_of(principal), "companyId": company_id or None}

    async def _remember_secrets(
        self, principal: Principal, company_id: str | None, values: dict[str, str]
    ) -> None:
        """Keep an encrypted copy keyed by owner, company and name, for pre-filling re-installs."""
        scope = self._scope(principal, company_id)
        now = utcnow()
        for name, value in values.items():
            await self.store["vault_secrets"].update_one(
                {**scope, "key": name},
                {
                    "$set": {"valueEncrypted": self.vault.encrypt(value), "updatedAt": now},
                    "$setOnInsert": {"_id": tokens.new_id(), "createdAt": now},
                },
                upsert=True,
            )

    async def _vault_prefill(
        self, principal: Principal, company_id: str | None, definition: dict[str, Any]
    ) -> dict[str, str]:
        required = list(definition.get("requiredSecrets") or [])
        if not required:
            return {}
        cursor = self.store["vault_secrets"].find(
            {**self._scope(principal, company_id), "key": {"$in": required}}
        )
        return {doc["key"]: self.vault.decrypt(doc["valueEncrypted"]) for doc in await cursor.to_list(None)}

    async def known_secrets(self, principal: Principal, company_id: str, keys: list[str]) -> list[str]:
        """The subset of `keys` the vault holds for this company (and this owner)."""
        require_unscoped(principal)
        cursor = self.store["vault_secrets"].find(
            {**self._scope(principal, company_id), "key": {"$in": keys}}, {"key": 1}
        )
        held = {doc["key"] for doc in await cursor.to_list(None)}
        return [key for key in keys if key in held]

    # ---- reading ---------------------------------------------------------------------

    async def owned(self, principal: Principal, install_id: str) -> Document:
        """The install, if the caller owns it and its key may reach it; else 404."""
        doc = await self.store.installs.find_one({"_id": install_id})
        if (
            doc is None
            or not is_visible(doc)
            or (principal.install_id is not None and principal.install_id != install_id)
            or not (doc.get("owner") == owner_of(principal) or await self._reached_by_session(principal, doc))
        ):
            raise NotFound("Install not found")
        return doc

    async def _reached_by_session(self, principal: Principal, doc: Document) -> bool:
        """A signed-in user also reaches the installs of orgs they belong to now (a member who
        left reaches nothing). Keys do not: a member's personal key stays personal."""
        if principal.via != "session" or principal.user_id is None:
            return False
        owner = doc.get("owner") or {}
        if owner.get("kind") != "org":
            return False  # a user's install: only its owner (checked before) reaches it
        member = {"orgId": owner["id"], "userId": principal.user_id}
        return await self.store.org_members.find_one(member, {"_id": 1}) is not None

    async def list(self, principal: Principal) -> list[dict[str, Any]]:
        """The caller's installs, newest first (an install-scoped key sees its install only)."""
        query: Document = {"owner": owner_of(principal), **VISIBLE}
        if principal.install_id is not None:
            query["_id"] = principal.install_id
        docs = await self.store.installs.find(query).sort("createdAt", DESCENDING).to_list(MAX_LISTED)
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

    async def mine(self, user_id: str) -> list[dict[str, Any]]:
        """Managed (`svc`) installs the user deployed or reaches through an org, with what is missing."""
        memberships = await self.store.org_members.find({"userId": user_id}).to_list(None)
        org_ids = [m["orgId"] for m in memberships]
        orgs = {o["_id"]: o for o in await self.store.orgs.find({"_id": {"$in": org_ids}}).to_list(None)}
        reach: list[Document] = [{"owner.kind": "user", "owner.id": user_id}]
        if org_ids:
            reach.append({"owner.kind": "org", "owner.id": {"$in": org_ids}})
        docs = (
            await self.store.installs.find({"platform": "svc", "$and": [VISIBLE, {"$or": reach}]})
            .sort("createdAt", DESCENDING)
            .to_list(MAX_LISTED)
        )
        org_secrets = await self._org_secret_names(org_ids)
        schedules = {
            doc["_id"]: doc.get("nextRunAt")
            for doc in await self.store["schedules"]
            .find({"_id": {"$in": [d["_id"] for d in docs]}, "enabled": True}, {"nextRunAt": 1})
            .to_list(None)
        }
        summaries = []
        for doc in docs:
            org = orgs.get(doc["owner"]["id"]) if doc["owner"]["kind"] == "org" else None
            definition = doc["definition"]
            required_vars = list(definition.get("requiredVariables") or [])
            have_secrets = set(doc.get("secretsEncrypted") or {}) | (
                org_secrets.get(org["_id"], set()) if org else set()
            )
            token = doc.get("webhookTokenEncrypted")
            summaries.append(
                {
                    "id": doc["_id"],
                    "name": org["name"] if org else doc["templateName"],
                    "pipelineName": doc["templateName"],
                    "orgSlug": org["slug"] if org else None,
                    "status": doc["status"],
                    "platform": doc["platform"],
                    "lastRunAt": iso(doc.get("lastRunAt")),
                    "nextRunAt": iso(schedules.get(doc["_id"])),
                    "webhookToken": self.vault.decrypt(token) if token else None,
                    "requiredVariables": required_vars,
                    "currentVariables": doc.get("variables") or {},
                    "missingSecrets": [
                        s for s in definition.get("requiredSecrets") or [] if s not in have_secrets
                    ],
                    "missingVariables": [v for v in required_vars if v not in (doc.get("variables") or {})],
                }
            )
        return summaries

    async def _org_secret_names(self, org_ids: list[str]) -> dict[str, set[str]]:
        if not org_ids:
            return {}
        names: dict[str, set[str]] = {}
        async for doc in self.store["org_secrets"].find({"orgId": {"$in": org_ids}}, {"orgId": 1, "key": 1}):
            names.setdefault(doc["orgId"], set()).add(doc["key"])
        return names

    # ---- configuring -----------------------------------------------------------------

    async def set_variables(self, principal: Principal, install_id: str, body: Any) -> list[str]:
        """Merge variables (only the template's required ones); the keys updated."""
        doc = await self.owned(principal, install_id)
        values = self._check_variables(doc["definition"], unwrap(body, "variables"))
        await self.store.installs.update_one(
            {"_id": install_id},
            {"$set": {**{f"variables.{k}": v for k, v in values.items()}, "updatedAt": utcnow()}},
        )
        return sorted(values)

    async def set_secrets(self, principal: Principal, install_id: str, body: Any) -> list[str]:
        """Merge secrets, encrypted; the keys updated (values are never logged or returned)."""
        doc = await self.owned(principal, install_id)
        if doc["platform"] not in ("svc", "orchA"):
            raise BadRequest(f"secrets are not accepted for platform {doc['platform']}")
        values = self._check_secret_names(unwrap(body, "secrets"))
        encrypted = {f"secretsEncrypted.{k}": self.vault.encrypt(v) for k, v in values.items()}
        await self.store.installs.update_one(
            {"_id": install_id}, {"$set": {**encrypted, "updatedAt": utcnow()}}
        )
        await self._remember_secrets(principal, doc.get("companyId"), values)
        return sorted(values)

    # ---- running on the platform -----------------------------------------------------

    async def invoke(self, principal: Principal, install_id: str, body: InvokeBody) -> dict[str, Any]:
        """Proxy one input to an orchC team; record the run's count, tokens and outcome."""
        doc = await self.owned(principal, install_id)
        if doc["platform"] != "orchC":
            raise BadRequest(
                f"invoke is only available for platform orchC (this install is {doc['platform']})"
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
        supervisor = next(iter(doc.get("deployedAgents") or []), {}).get("key")
        try:
            result = await self.plugins.invoke(doc["platform"], context)
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

    # ---- removing --------------------------------------------------------------------

    async def delete(self, principal: Principal, install_id: str, remove_upstream: bool) -> dict[str, Any]:
        """Cancel the install; for orchC (or when asked) remove the agents upstream first."""
        doc = await self.owned(principal, install_id)
        if doc["status"] == "cancelled":
            raise Conflict("Install is already cancelled")
        deleted, warnings = await self._remove_upstream(doc, remove_upstream)
        await self.retire(doc)
        response: dict[str, Any] = {
            "ok": True,
            "installId": install_id,
            "platform": doc["platform"],
            "deletedAgents": deleted,
        }
        if warnings:
            response["warnings"] = list(warnings)
        return response

    async def _remove_upstream(self, doc: Document, remove_upstream: bool) -> tuple[int, tuple[str, ...]]:
        """orchC (or any platform when asked): delete the agents upstream; (deleted, warnings)."""
        install_id = doc["_id"]
        deleted, warnings = 0, ()
        if doc["platform"] == "orchC" or (remove_upstream and doc["platform"] != "svc"):
            context = DeprovisionContext(
                install_id=install_id,
                platform=doc["platform"],
                credentials=self._decrypt_json(doc.get("credentialsEncrypted")),
                deployed_agents=tuple(DeployedAgent(**a) for a in doc.get("deployedAgents") or []),
                state=self._decrypt_json(doc.get("platformStateEncrypted")),
                options=doc.get("options") or {},
                allow_private=self.settings.egress_allow_private,
            )
            try:
                result = await self.plugins.deprovision(doc["platform"], context)
            except PlatformError as exc:
                raise BadGateway(exc.detail, upstreamStatus=exc.upstream_status) from None
            deleted, warnings = result.deleted_agents, tuple(result.warnings)
        return deleted, warnings

    async def retire(self, doc: Document) -> None:
        """Mark the install cancelled: its webhook and install tokens stop working at once."""
        install_id = doc["_id"]
        unset = {"webhookTokenHash": "", "webhookTokenEncrypted": ""}
        if doc["platform"] == "orchC":
            unset["credentialsEncrypted"] = ""
        await self.store.installs.update_one(
            {"_id": install_id},
            {
                "$set": {"status": "cancelled", "cancelledAt": utcnow(), "updatedAt": utcnow()},
                "$unset": unset,
            },
        )
        await self.store.install_tokens.delete_many({"installId": install_id})

    # ---- helpers ---------------------------------------------------------------------

    def _encrypt_json(self, value: dict[str, Any]) -> str:
        return self.vault.encrypt(json.dumps(value))

    def _decrypt_json(self, token: str | None) -> dict[str, Any]:
        return json.loads(self.vault.decrypt(token)) if token else {}
