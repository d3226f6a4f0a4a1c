"""orchA (Paperclip): the wire shared by the driver (plugins/builtin/orch_a.py) and its upgrades
(plugins/builtin/orch_a_upgrade.py): the HTTP client, the agent create body (role, adapter,
instructions bundle), managers-first order and the UI links. A plain module of helpers; not
registered as a plugin.
"""

from __future__ import annotations

from typing import Any

import httpx

from config.catalogue import ORCH_A_MODELS
from plugins.egress import EgressDenied, egress_client
from plugins.types import DeployedAgent, PlatformError, PlatformInputError, ProvisionContext

ROLES = (
    "ceo",
    "cto",
    "cmo",
    "cfo",
    "security",
    "pm",
    "engineer",
    "designer",
    "qa",
    "devops",
    "researcher",
    "general",
)
ROLE_ALIASES = {"manager": "pm", "product manager": "pm", "developer": "engineer", "research": "researcher"}
LOCAL_ADAPTERS = {"providerA": "claude_local", "providerB": "codex_local", "providerC": "gemini_local"}
WEBHOOK_SECRET_HEADER = "X-Svc-Webhook-Secret"
HTTP_TIMEOUT_MS = 120_000
# No word on how the host resolved: that would be a host-name oracle for key holders.
ORCH_A_REFUSED = (
    "credentials.orchABaseUrl: base URL not allowed (only public addresses are reached unless the "
    "operator sets SVC_EGRESS_ALLOW_PRIVATE=true for an orchA on a private network)"
)
# What a deployer can do about Paperclip's refusals (appended to the 502's message).
HINTS = {
    401: " (the board key is wrong, expired or revoked: create one with POST /api/board-api-keys and "
    "rotate it with PATCH /api/installs/:id/credentials)",
    403: " (the board key cannot reach this company: check companyId, or use a key of its board user)",
}
# Paperclip's local adapters default to skipping their own approval prompts and sandbox; agents a
# template deploys do not get that without the operator choosing it in Paperclip.
SAFE_DEFAULTS = {
    "claude_local": {"dangerouslySkipPermissions": False},
    "codex_local": {"dangerouslyBypassApprovalsAndSandbox": False},
}
# Timer heartbeats are off: templates carry no schedule, and a timer costs a model call per tick
# on the deployer's account. Assignment, comments and on-demand wakeups still wake the agent.
RUNTIME_CONFIG = {"heartbeat": {"enabled": False, "wakeOnDemand": True}}


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


def adapter(agent: dict[str, Any], context: ProvisionContext) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The adapter type, adapter config and other create-body fields of one agent."""
    options = context.options
    kind = agent.get("adapterType") or options.get("adapterType")
    model = options.get("model") or agent["model"]
    if kind == "http":
        url = options.get("webhookUrl") or context.runtime_webhook_url
        return (
            "http",
            {
                "url": url,
                "headers": {WEBHOOK_SECRET_HEADER: context.webhook_secret},
                "payloadTemplate": {"installId": context.install_id, "agentKey": agent["key"]},
                "timeoutMs": HTTP_TIMEOUT_MS,
            },
            {},
        )
    kind = kind or LOCAL_ADAPTERS.get(model.split(":", 1)[0], "process")
    env = {
        **context.secrets,
        "SVC_INSTALL_TOKEN": context.install_token,
        "SVC_INGEST_URL": context.ingest_url,
    }
    config: dict[str, Any] = {"env": env, **SAFE_DEFAULTS.get(kind, {})}
    if model in ORCH_A_MODELS:
        config["model"] = ORCH_A_MODELS[model]
    if options.get("cwd"):
        config["cwd"] = options["cwd"]
    extra = {
        # Paperclip reads the prompt from a top-level bundle; inside adapterConfig it is ignored.
        "instructionsBundle": {"files": {"AGENTS.md": agent.get("prompt") or agent["name"]}},
        # What the reporting plugin needs to post this agent's runs to our ingest endpoint.
        "metadata": {
            "svcReporting": {
                "ingestUrl": context.ingest_url,
                "installToken": context.install_token,
                "installId": context.install_id,
                "agentKey": agent["key"],
            }
        },
    }
    return kind, config, extra


def agent_body(agent: dict[str, Any], context: ProvisionContext, ids: dict[str, str]) -> dict[str, Any]:
    """One agent's create body (provisioning, and upgrades): profile, manager, adapter, bundle."""
    kind, config, extra = adapter(agent, context)
    profile = {field: agent.get(field, "") for field in ("title", "capabilities")}
    return {
        "name": agent["name"],
        "role": upstream_role(agent.get("role", "")),
        **profile,
        "reportsTo": ids.get(agent.get("reportsTo") or ""),
        "adapterType": kind,
        "adapterConfig": config,
        "runtimeConfig": RUNTIME_CONFIG,
        **extra,
    }


class Client:
    """Calls one Paperclip instance; every failure becomes a PlatformError without the key."""

    def __init__(self, credentials: dict[str, str], allow_private: bool) -> None:
        self.base = credentials["orchABaseUrl"].rstrip("/")
        self.http = egress_client(
            allow_private, headers={"Authorization": f"Bearer {credentials['orchAApiKey']}"}
        )

    async def call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """One request; the JSON body of a 2xx answer."""
        try:
            response = await self.http.request(method, f"{self.base}{path}", json=body, headers=headers)
        except EgressDenied:
            raise PlatformInputError(ORCH_A_REFUSED) from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise PlatformError(
                f"orchA {method} {path} failed: {type(exc).__name__} "
                "(is Paperclip running and reachable at orchABaseUrl?)"
            ) from None
        if response.status_code >= 300:
            raise PlatformError(
                f"orchA {method} {path} answered HTTP {response.status_code}: {response.text[:200]}"
                + HINTS.get(response.status_code, ""),
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
        if isinstance(data, list):
            return {"items": data}
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


def ui_links(base: str, prefix: str, deployed: list[DeployedAgent]) -> dict[str, Any]:
    """Links into Paperclip's UI, whose routes hang off the company's issue prefix."""
    return {
        "dashboardUrl": f"{base}/{prefix}/dashboard",
        "agentUrls": [{"name": a.name, "url": f"{base}/{prefix}/agents/{a.externalId}"} for a in deployed],
    }
