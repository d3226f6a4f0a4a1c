"""orchA: a driver modelled on the open-source Paperclip orchestrator's REST API.

A board key authenticates every call (`Authorization: Bearer <orchAApiKey>`).
Provisioning optionally creates a company, then one agent per team agent,
managers before their reports so `reportsTo` can name the manager's upstream id.
`http` agents call our managed runtime (or the deployer's `webhookUrl`) with a
per-install shared secret header; local adapters get the prompt as an
`AGENTS.md` file and the install's secrets, install token and ingest URL as
environment variables. See docs/platforms/orchA.md.
"""

from __future__ import annotations

from typing import Any

import httpx

from plugins.egress import EgressDenied, egress_client
from plugins.hookspecs import hookimpl
from plugins.types import (
    CredentialField,
    DeployedAgent,
    DeprovisionContext,
    DeprovisionResult,
    PlatformCapabilities,
    PlatformError,
    PlatformInfo,
    PlatformInputError,
    PlatformTraits,
    ProvisionContext,
    ProvisionResult,
)

PLATFORM = "orchA"
ROLES = ("ceo", "cto", "cmo", "cfo", "pm", "engineer", "designer", "qa", "devops", "researcher", "general")
ROLE_ALIASES = {"manager": "pm", "product manager": "pm", "developer": "engineer", "research": "researcher"}
LOCAL_ADAPTERS = {"providerA": "claude_local", "providerB": "codex_local", "providerC": "gemini_local"}
WEBHOOK_SECRET_HEADER = "X-Svc-Webhook-Secret"
HTTP_TIMEOUT_MS = 120_000
# No word on how the host resolved: that would be a host-name oracle for key holders.
ORCH_A_REFUSED = (
    "credentials.orchABaseUrl: base URL not allowed (only public addresses are reached unless the "
    "operator sets SVC_EGRESS_ALLOW_PRIVATE=true for an orchA on a private network)"
)
INFO = PlatformInfo(
    id=PLATFORM,
    label="Paperclip",
    credential_fields=(
        CredentialField("orchABaseUrl", "Base URL", "text"),
        CredentialField("orchAApiKey", "Board API key", "password"),
    ),
    capabilities=PlatformCapabilities(billingCompleteness="full"),
    accepts=frozenset(
        {
            "credentials",
            "variables",
            "secrets",
            "model",
            "companyId",
            "companyName",
            "adapterType",
            "webhookUrl",
            "cwd",
        }
    ),
    traits=PlatformTraits(
        uses_secrets=True,
        secrets_updatable=True,
        heartbeats=True,
        top_level_credentials=frozenset({"orchABaseUrl", "orchAApiKey"}),
    ),
)


@hookimpl
def svc_platforms() -> list[PlatformInfo]:
    """Paperclip."""
    return [INFO]


@hookimpl
def svc_validate_install(
    platform: str, fields: dict[str, Any], definition: dict[str, Any]
) -> list[str] | None:
    """A company (id or name to create), an http(s) base URL, a key; webhook URLs must be http(s)."""
    problems = []
    credentials = fields.get("credentials") or {}
    base = str(credentials.get("orchABaseUrl", ""))
    if not base.startswith(("http://", "https://")):
        problems.append("credentials.orchABaseUrl must be an http(s) URL")
    if not credentials.get("orchAApiKey"):
        problems.append("credentials.orchAApiKey is required")
    if bool(fields.get("companyId")) == bool(fields.get("companyName")):
        problems.append("exactly one of companyId and companyName is required for platform orchA")
    webhook = fields.get("webhookUrl")
    if webhook is not None and not str(webhook).startswith(("http://", "https://")):
        problems.append("webhookUrl must be an http(s) URL")
    return problems


def upstream_role(role: str) -> str:
    """Our free-text role on Paperclip's fixed list (unknown roles are `general`)."""
    role = role.strip().lower()
    role = ROLE_ALIASES.get(role, role)
    return role if role in ROLES else "general"


def managers_first(agents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Agents ordered so every manager comes before its reports."""
    by_key = {agent["key"]: agent for agent in agents}
    ordered: list[dict[str, Any]] = []
    placed: set[str] = set()

    def place(agent: dict[str, Any]) -> None:
        if agent["key"] in placed:
            return
        manager = agent.get("reportsTo")
        if manager in by_key:
            place(by_key[manager])
        placed.add(agent["key"])
        ordered.append(agent)

    for agent in agents:
        place(agent)
    return ordered


def adapter(agent: dict[str, Any], context: ProvisionContext) -> tuple[str, dict[str, Any]]:
    """The adapter type and config of one agent."""
    options = context.options
    kind = agent.get("adapterType") or options.get("adapterType")
    model = options.get("model") or agent["model"]
    if kind == "http":
        url = options.get("webhookUrl") or context.runtime_webhook_url
        return "http", {
            "url": url,
            "headers": {WEBHOOK_SECRET_HEADER: context.webhook_secret},
            "payloadTemplate": {"installId": context.install_id, "agentKey": agent["key"]},
            "timeoutMs": HTTP_TIMEOUT_MS,
        }
    kind = kind or LOCAL_ADAPTERS.get(model.split(":", 1)[0], "process")
    env = {
        **context.secrets,
        "SVC_INSTALL_TOKEN": context.install_token,
        "SVC_INGEST_URL": context.ingest_url,
    }
    config: dict[str, Any] = {
        "model": model,
        "env": env,
        "instructionsBundle": {"files": [{"path": "AGENTS.md", "content": agent.get("prompt", "")}]},
    }
    if options.get("cwd"):
        config["cwd"] = options["cwd"]
    return kind, config


class Client:
    """Calls one Paperclip instance; every failure becomes a PlatformError without the key."""

    def __init__(self, credentials: dict[str, str], allow_private: bool) -> None:
        self.base = credentials["orchABaseUrl"].rstrip("/")
        self.http = egress_client(
            allow_private, headers={"Authorization": f"Bearer {credentials['orchAApiKey']}"}
        )

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One request; the JSON body of a 2xx answer."""
        try:
            response = await self.http.request(method, f"{self.base}{path}", json=body)
        except EgressDenied:
            raise PlatformInputError(ORCH_A_REFUSED) from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise PlatformError(f"orchA {method} {path} failed: {type(exc).__name__}") from None
        if response.status_code >= 300:
            raise PlatformError(
                f"orchA {method} {path} answered HTTP {response.status_code}: {response.text[:200]}",
                response.status_code,
                denied=response.status_code in (401, 403),
            )
        if not response.content:
            return {}
        try:
            data = response.json()
        except ValueError:
            raise PlatformError(
                f"orchA {method} {path} answered HTTP {response.status_code} without JSON",
                response.status_code,
            ) from None
        if not isinstance(data, dict):
            raise PlatformError(f"orchA {method} {path} answered an unexpected body", response.status_code)
        return data

    async def create(self, path: str, body: dict[str, Any]) -> str:
        """POST that must answer an object with an `id`; the id."""
        made = await self.call("POST", path, body)
        if not isinstance(made.get("id"), (str, int)):
            raise PlatformError(f"orchA POST {path} answered without an id")
        return str(made["id"])

    async def close(self) -> None:
        """Release connections."""
        await self.http.aclose()


@hookimpl
async def svc_provision(platform: str, context: ProvisionContext) -> ProvisionResult | None:
    """Create the company (if asked), then the agents, managers first; undo all on failure."""
    client = Client(context.credentials, context.allow_private)
    created: list[str] = []
    created_company: str | None = None
    try:
        company_id = context.options.get("companyId")
        if not company_id:
            company_id = created_company = await client.create(
                "/api/companies", {"name": context.options["companyName"]}
            )
        upstream_ids: dict[str, str] = {}
        deployed = []
        for agent in managers_first(context.definition["agents"]):
            kind, config = adapter(agent, context)
            body = {
                "name": agent["name"],
                "role": upstream_role(agent.get("role", "")),
                "title": agent.get("title", ""),
                "capabilities": agent.get("capabilities", ""),
                "reportsTo": upstream_ids.get(agent.get("reportsTo") or ""),
                "adapterType": kind,
                "adapterConfig": config,
            }
            agent_id = await client.create(f"/api/companies/{company_id}/agents", body)
            upstream_ids[agent["key"]] = agent_id
            created.append(agent_id)
            deployed.append(DeployedAgent(key=agent["key"], externalId=agent_id, name=agent["name"]))
        base = client.base
        return ProvisionResult(
            deployed_agents=tuple(deployed),
            platform_data={
                "dashboardUrl": f"{base}/companies/{company_id}",
                "agentUrls": [{"name": a.name, "url": f"{base}/agents/{a.externalId}"} for a in deployed],
            },
            state={"companyId": company_id, "createdCompany": created_company is not None},
            company_id=company_id,
        )
    except PlatformError:
        for agent_id in reversed(created):
            try:
                await client.call("DELETE", f"/api/agents/{agent_id}")
            except PlatformError:
                pass  # best effort: the original error is the one to report
        if created_company is not None:
            try:
                await client.call("DELETE", f"/api/companies/{created_company}")
            except PlatformError:
                pass
        raise
    finally:
        await client.close()


@hookimpl
async def svc_deprovision(platform: str, context: DeprovisionContext) -> DeprovisionResult | None:
    """Delete every provisioned agent; failures become warnings, a refused key a 502."""
    client = Client(context.credentials, context.allow_private)
    deleted, warnings = 0, []
    try:
        for agent in context.deployed_agents:
            try:
                await client.call("DELETE", f"/api/agents/{agent.externalId}")
                deleted += 1
            except PlatformError as exc:
                if exc.denied:
                    raise
                if exc.upstream_status == 404:
                    continue  # already gone
                warnings.append(f"agent {agent.key}: {exc.detail}")
    finally:
        await client.close()
    return DeprovisionResult(deleted_agents=deleted, warnings=tuple(warnings))
