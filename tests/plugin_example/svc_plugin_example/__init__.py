"""An example third-party plugin: a fifth platform whose "upstream" is an in-memory registry.

It uses only the public contract (`plugins.hookspecs.hookimpl` and `plugins.types`).
"""

from __future__ import annotations

from typing import Any

from plugins.hookspecs import hookimpl
from plugins.types import (
    CredentialField,
    DeployedAgent,
    DeprovisionContext,
    DeprovisionResult,
    PlatformCapabilities,
    PlatformInfo,
    ProvisionContext,
    ProvisionResult,
)

PLATFORM = "exampleRun"
DEPLOYED: dict[str, list[str]] = {}


@hookimpl
def svc_platforms() -> list[PlatformInfo]:
    """One platform, with one credential."""
    return [
        PlatformInfo(
            id=PLATFORM,
            label="Example runner",
            credential_fields=(CredentialField("token", "Access token", "password"),),
            capabilities=PlatformCapabilities(maxHierarchyDepth=2, billingCompleteness="none"),
            accepts=frozenset({"credentials", "variables", "model"}),
        )
    ]


@hookimpl
def svc_validate_install(
    platform: str, fields: dict[str, Any], definition: dict[str, Any]
) -> list[str] | None:
    """Tokens must start with `ex_`."""
    if platform != PLATFORM:
        return None
    token = (fields.get("credentials") or {}).get("token", "")
    return [] if token.startswith("ex_") else ["credentials.token must start with ex_"]


@hookimpl
async def svc_provision(platform: str, context: ProvisionContext) -> ProvisionResult | None:
    """Register each agent in memory."""
    if platform != PLATFORM:
        return None
    agents = tuple(
        DeployedAgent(a["key"], f"ex-{context.install_id}-{a['key']}", a["name"])
        for a in context.definition["agents"]
    )
    DEPLOYED[context.install_id] = [a.externalId for a in agents]
    return ProvisionResult(deployed_agents=agents, platform_data={"dashboardUrl": None, "agentUrls": []})


@hookimpl
async def svc_deprovision(platform: str, context: DeprovisionContext) -> DeprovisionResult | None:
    """Forget the install's agents."""
    if platform != PLATFORM:
        return None
    removed = DEPLOYED.pop(context.install_id, [])
    return DeprovisionResult(deleted_agents=len(removed))
