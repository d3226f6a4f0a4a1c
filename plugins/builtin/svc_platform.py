"""The `svc` platform: the service itself is the runtime, so nothing is provisioned upstream."""

from __future__ import annotations

from typing import Any

from plugins.hookspecs import hookimpl
from plugins.types import (
    DeployedAgent,
    DeprovisionContext,
    DeprovisionResult,
    PlatformCapabilities,
    PlatformInfo,
    PlatformTraits,
    ProvisionContext,
    ProvisionResult,
)

PLATFORM = "svc"
INFO = PlatformInfo(
    id=PLATFORM,
    label="Managed runtime",
    capabilities=PlatformCapabilities(billingCompleteness="full"),
    accepts=frozenset({"variables"}),
    listed=False,
    traits=PlatformTraits(managed=True, uses_secrets=True, secrets_updatable=True, runs_mcp=True),
)


@hookimpl
def svc_platforms() -> list[PlatformInfo]:
    """The managed runtime (not listed in GET /api/platforms)."""
    return [INFO]


@hookimpl
def svc_validate_install(
    platform: str, fields: dict[str, Any], definition: dict[str, Any]
) -> list[str] | None:
    """Nothing to check: secrets come after install, the runtime reads the definition."""
    return []


@hookimpl
def svc_provision(platform: str, context: ProvisionContext) -> ProvisionResult | None:
    """Every agent runs in our runtime; its external id is `<install>:<agent key>`."""
    agents = tuple(
        DeployedAgent(key=a["key"], externalId=f"{context.install_id}:{a['key']}", name=a["name"])
        for a in context.definition["agents"]
    )
    return ProvisionResult(deployed_agents=agents, platform_data={"dashboardUrl": None, "agentUrls": []})


@hookimpl
def svc_deprovision(platform: str, context: DeprovisionContext) -> DeprovisionResult | None:
    """Nothing upstream to delete."""
    return DeprovisionResult(deleted_agents=0)
