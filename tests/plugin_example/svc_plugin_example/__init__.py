"""An example third-party plugin: a fifth platform whose "upstream" is an in-memory registry.

It uses only the public contract (`plugins.hookspecs.hookimpl` and `plugins.types`), and its
traits differ from every built-in platform's, so a test can show the core honours each one
without a core change: it takes secrets (remembered, and updatable after install), is polled
for its runs, reports no token counts, answers invoke, is always removed upstream on delete,
and takes teams at most two levels deep. Hooks need no platform check: the service calls them
only for the platform this plugin declared.
"""

from __future__ import annotations

from typing import Any

from plugins.hookspecs import hookimpl
from plugins.types import (
    CredentialField,
    DeployedAgent,
    DeprovisionContext,
    DeprovisionResult,
    InvokeContext,
    InvokeResult,
    PlatformCapabilities,
    PlatformInfo,
    PlatformTraits,
    PollContext,
    ProvisionContext,
    ProvisionResult,
    RunReport,
)

PLATFORM = "exampleRun"
DEPLOYED: dict[str, list[str]] = {}
# What the "upstream" saw, for the tests: install tokens handed over, runs to report, invokes.
INSTALL_TOKENS: dict[str, str] = {}
SECRETS_SEEN: dict[str, dict[str, str]] = {}
UPSTREAM_RUNS: dict[str, list[RunReport]] = {}
INVOKED: list[str] = []


@hookimpl
def svc_platforms() -> list[PlatformInfo]:
    """One platform, with one credential and traits of its own."""
    return [
        PlatformInfo(
            id=PLATFORM,
            label="Example runner",
            credential_fields=(CredentialField("token", "Access token", "password"),),
            capabilities=PlatformCapabilities(maxHierarchyDepth=2, billingCompleteness="none"),
            accepts=frozenset({"credentials", "variables", "model", "secrets"}),
            traits=PlatformTraits(
                uses_secrets=True,
                secrets_updatable=True,
                polled=True,
                reports_tokens=False,
                invokable=True,
                deprovision_on_delete=True,
            ),
        )
    ]


@hookimpl
def svc_validate_install(platform: str, fields: dict[str, Any], definition: dict[str, Any]) -> list[str]:
    """Tokens must start with `ex_`."""
    token = (fields.get("credentials") or {}).get("token", "")
    return [] if token.startswith("ex_") else ["credentials.token must start with ex_"]


@hookimpl
async def svc_provision(platform: str, context: ProvisionContext) -> ProvisionResult:
    """Register each agent in memory."""
    agents = tuple(
        DeployedAgent(a["key"], f"ex-{context.install_id}-{a['key']}", a["name"])
        for a in context.definition["agents"]
    )
    DEPLOYED[context.install_id] = [a.externalId for a in agents]
    INSTALL_TOKENS[context.install_id] = context.install_token
    SECRETS_SEEN[context.install_id] = dict(context.secrets)
    return ProvisionResult(deployed_agents=agents, platform_data={"dashboardUrl": None, "agentUrls": []})


@hookimpl
async def svc_deprovision(platform: str, context: DeprovisionContext) -> DeprovisionResult:
    """Forget the install's agents."""
    removed = DEPLOYED.pop(context.install_id, [])
    return DeprovisionResult(deleted_agents=len(removed))


@hookimpl
async def svc_invoke(platform: str, context: InvokeContext) -> InvokeResult:
    """Echo the input, as the team's answer."""
    INVOKED.append(context.input_text)
    return InvokeResult(text=f"echo: {context.input_text}", session_id="s-1", agent_name="lead")


@hookimpl
async def svc_poll_runs(platform: str, context: PollContext) -> list[RunReport]:
    """The runs queued for this install upstream."""
    return list(UPSTREAM_RUNS.get(context.install_id, []))
