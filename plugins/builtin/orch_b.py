"""The `orchB` platform driver: teams as Relevance AI agents (docs/platforms/orchB.md).

One upstream agent per team agent, created with `POST /agents/upsert` and removed
with `POST /agents/{id}/delete`. orchB has no push reporting: the run poller calls
`svc_poll_runs`, which reads the conversation list. No token counts exist upstream.
Every request goes through the egress guard; credentials never appear in errors or logs.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

import httpx

from config.catalogue import UPSTREAM
from plugins.builtin.orch_b_client import (
    REGION_RE,
    base_url,
    call,
    delete_agent,
    json_body,
    model_for,
    redact,
    upsert_agent,
    upsert_body,
)
from plugins.builtin.orch_b_upgrade import upgrade
from plugins.egress import egress_client
from plugins.hookspecs import hookimpl
from plugins.types import (
    CredentialField,
    DeployedAgent,
    DeprovisionContext,
    DeprovisionResult,
    PlatformCapabilities,
    PlatformError,
    PlatformInfo,
    PlatformTraits,
    PollContext,
    ProvisionContext,
    ProvisionResult,
    RunReport,
)

log = logging.getLogger(__name__)

PLATFORM = "orchB"
DASHBOARD_URL = "https://app.relevanceai.com/agents/{region}/{project_id}"
CREDENTIAL_KEYS = ("projectId", "apiKey", "region")
PAGE_SIZE = 100
MAX_PAGES = 20
# Conversation states (Relevance AI task states) that end a run; anything else is still going.
COMPLETED_STATES = frozenset({"completed", "idle"})
FAILED_STATES = frozenset({"errored-pending-approval", "timed-out", "unrecoverable", "cancelled"})

INFO = PlatformInfo(
    id=PLATFORM,
    label="Relevance AI",
    credential_fields=(
        CredentialField(key="projectId", label="Project ID", type="text"),
        CredentialField(key="apiKey", label="API key", type="password"),
        CredentialField(key="region", label="Region", type="text"),
    ),
    capabilities=PlatformCapabilities(
        maxHierarchyDepth=None, supportedModels=None, billingCompleteness="none", provisioningModel="rest"
    ),
    accepts=frozenset({"credentials", "variables", "model"}),
    traits=PlatformTraits(polled=True, reports_tokens=False),
)


def _parse_time(value: Any) -> datetime | None:
    """An ISO 8601 time as an aware datetime (naive means UTC); None when unparseable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


# ---- hooks ----------------------------------------------------------------------------


@hookimpl
def svc_platforms() -> list[PlatformInfo]:
    """Relevance AI."""
    return [INFO]


@hookimpl
def svc_validate_install(
    platform: str, fields: dict[str, Any], definition: dict[str, Any]
) -> list[str] | None:
    """Credentials present and well-formed (region is used in a hostname), models known."""
    problems: list[str] = []
    credentials = fields.get("credentials")
    if not isinstance(credentials, dict):
        problems.append("orchB credentials are required: projectId, apiKey, region")
    else:
        for key in CREDENTIAL_KEYS:
            value = credentials.get(key)
            if not isinstance(value, str) or not value.strip():
                problems.append(f"orchB credentials.{key} is required (a non-empty string)")
        region = credentials.get("region")
        if isinstance(region, str) and region.strip() and not REGION_RE.fullmatch(region):
            problems.append("orchB credentials.region must be 1 to 32 lowercase letters, digits or hyphens")
    model = fields.get("model")
    if model is not None and model not in UPSTREAM:
        problems.append(f"model {model!r} is not a known model")
    elif model is None:
        for agent in definition.get("agents") or []:
            if isinstance(agent, dict) and agent.get("model") not in UPSTREAM:
                problems.append(f"agent {agent.get('key')!r} has an unknown model {agent.get('model')!r}")
    return problems


@hookimpl
async def svc_provision(platform: str, context: ProvisionContext) -> ProvisionResult | None:
    """One upstream agent per team agent; on any failure delete what this call made, then raise."""
    credentials = context.credentials
    agents = list(context.definition.get("agents") or [])
    models: list[str] = []
    for agent in agents:
        model = model_for(agent, context.options)
        if model is None:
            raise PlatformError(f"orchB cannot deploy agent {agent.get('key')!r}: unknown model")
        models.append(model)
    base = base_url(credentials)
    region = credentials.get("region", "")
    dashboard = DASHBOARD_URL.format(region=region, project_id=credentials.get("projectId", ""))
    created: list[DeployedAgent] = []
    async with egress_client(allow_private=context.allow_private) as client:
        try:
            for agent, model in zip(agents, models, strict=True):
                body = upsert_body(agent, model, context.install_id, context.ingest_url)
                agent_id = await upsert_agent(client, base, body, credentials)
                created.append(DeployedAgent(key=agent["key"], externalId=agent_id, name=agent["name"]))
                if context.on_created is not None:
                    await context.on_created(created[-1])
        except PlatformError as exc:
            left = await _rollback(client, base, created, credentials)
            log.warning(
                "orchB provisioning failed",
                extra={
                    "installId": context.install_id,
                    "upstreamStatus": exc.upstream_status,
                    "createdAgents": len(created),
                    "rollbackLeft": left,
                },
            )
            if left:
                detail = f"{exc.detail} (rollback could not delete {left} agent(s))"
                raise PlatformError(detail, exc.upstream_status, denied=exc.denied) from None
            raise
        except BaseException:
            # Egress refusal, cancellation, a bug: still delete what was made, then let it through.
            await _rollback(client, base, created, credentials)
            raise
    log.info("orchB team provisioned", extra={"installId": context.install_id, "agents": len(created)})
    return ProvisionResult(
        deployed_agents=tuple(created),
        platform_data={
            "dashboardUrl": dashboard,
            "agentUrls": [{"name": a.name, "url": f"{dashboard}/{a.externalId}"} for a in created],
        },
        state={"agentIds": [a.externalId for a in created]},
    )


async def _rollback(
    client: httpx.AsyncClient, base: str, created: list[DeployedAgent], credentials: dict[str, str]
) -> int:
    """Delete the agents a failed provisioning made (newest first); how many could not be deleted."""
    left = 0
    for agent in reversed(created):
        try:
            await delete_agent(client, base, agent.externalId, credentials)
        except Exception as exc:  # best effort: the original failure is what is raised
            left += 1
            log.warning(
                "orchB rollback could not delete an agent",
                extra={"agentId": agent.externalId, "error": redact(str(exc), credentials)},
            )
    return left


@hookimpl
async def svc_deprovision(platform: str, context: DeprovisionContext) -> DeprovisionResult | None:
    """Delete every deployed agent; failures become warnings, all-denied raises `denied=True`."""
    credentials = context.credentials
    agent_ids = [a.externalId for a in context.deployed_agents] or list(context.state.get("agentIds") or [])
    agent_ids += list(context.state.get("leftoverAgents") or [])  # deletes an upgrade could not make
    if not agent_ids:
        return DeprovisionResult(deleted_agents=0)
    base = base_url(credentials)
    deleted = 0
    warnings: list[str] = []
    denied: list[PlatformError] = []
    async with egress_client(allow_private=context.allow_private) as client:
        for agent_id in agent_ids:
            try:
                await delete_agent(client, base, agent_id, credentials)
            except PlatformError as exc:
                warnings.append(f"agent {agent_id}: {exc.detail}")
                if exc.denied:
                    denied.append(exc)
            else:
                deleted += 1
    if denied and len(denied) == len(agent_ids):
        status = denied[0].upstream_status
        detail = f"orchB refused to delete agents (HTTP {status}): check the API key's permissions"
        raise PlatformError(detail, status, denied=True)
    log.info(
        "orchB team deprovisioned",
        extra={"installId": context.install_id, "deleted": deleted, "failed": len(warnings)},
    )
    return DeprovisionResult(deleted_agents=deleted, warnings=tuple(warnings))


@hookimpl
async def svc_upgrade(platform: str, context: Any) -> Any:
    """An UpgradeContext: upsert, create and remove agents in place (plugins/builtin/orch_b_upgrade.py)."""
    return await upgrade(context)


@hookimpl
async def svc_poll_runs(platform: str, context: PollContext) -> list[RunReport] | None:
    """Finished conversations of the deployed agents updated after `since`, newest first."""
    agent_ids = [a.externalId for a in context.deployed_agents]
    if not agent_ids:
        return []
    since = _parse_time(context.since) if context.since else None
    if context.since and since is None:
        raise PlatformError("orchB poll: `since` is not an ISO 8601 time")
    credentials = context.credentials
    base = base_url(credentials)
    filters = json.dumps(
        [
            {
                "field": "conversation.agent_id",
                "filter_type": "exact_match",
                "condition": "==",
                "condition_value": agent_ids,
            },
        ]
    )
    sort = json.dumps([{"update_date": "desc"}])
    known = set(agent_ids)
    reports: list[RunReport] = []
    async with egress_client(allow_private=context.allow_private) as client:
        for page in range(1, MAX_PAGES + 1):
            params = {"filters": filters, "sort": sort, "page_size": str(PAGE_SIZE), "page": str(page)}
            response = await call(
                client,
                "GET",
                f"{base}/agents/conversations/list",
                "agents/conversations/list",
                credentials,
                params=params,
            )
            answer = json_body(response, "agents/conversations/list")
            results = answer.get("results") if isinstance(answer, dict) else None
            if not isinstance(results, list):
                raise PlatformError(
                    "orchB agents/conversations/list returned no results list", response.status_code
                )
            reached_since = False
            for item in results:
                report, updated = _report(item, known, agent_ids)
                if since is not None and (updated is None or updated <= since):
                    reached_since = reached_since or updated is not None
                    continue
                if report is not None:
                    reports.append(report)
            if reached_since or len(results) < PAGE_SIZE:
                break
        else:
            log.warning(
                "orchB poll stopped at the page limit",
                extra={"installId": context.install_id, "pages": MAX_PAGES},
            )
    return reports


def _report(item: Any, known: set[str], agent_ids: list[str]) -> tuple[RunReport | None, datetime | None]:
    """One conversation list item as a run report (None while unfinished) and its update time."""
    metadata = item.get("metadata") if isinstance(item, dict) else None
    if not isinstance(metadata, dict):
        return None, None
    updated = _parse_time(metadata.get("update_date"))
    conversation = found if isinstance(found := metadata.get("conversation"), dict) else {}
    run_id = metadata.get("knowledge_set") or metadata.get("conversation_id")
    agent_id = conversation.get("agent_id") or metadata.get("agent_id")
    if agent_id is None and len(agent_ids) == 1:
        agent_id = agent_ids[0]
    if not isinstance(run_id, str) or agent_id not in known:
        return None, updated
    state = conversation.get("state")
    stamp = updated.astimezone(UTC).isoformat(timespec="milliseconds")[:-6] + "Z" if updated else None
    if state in COMPLETED_STATES:
        return RunReport(platformAgentId=agent_id, runId=run_id, status="completed", updatedAt=stamp), updated
    if state in FAILED_STATES:
        return RunReport(
            platformAgentId=agent_id,
            runId=run_id,
            status="failed",
            errorMessage=f"conversation state {state}",
            updatedAt=stamp,
        ), updated
    return None, updated
