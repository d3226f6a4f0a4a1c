"""orchA: a driver modelled on the open-source Paperclip orchestrator's REST API.

A board key authenticates every call (`Authorization: Bearer <orchAApiKey>`).
Provisioning optionally creates a company, then one agent per team agent,
managers before their reports so `reportsTo` can name the manager's upstream id.
`http` agents call our managed runtime (or the deployer's `webhookUrl`) with a
per-install shared secret header, and get an agent key of their own so the
runtime can write each run's outcome back to the issue (Paperclip's run token
only reaches its connection tools); local adapters get the prompt as a
top-level `AGENTS.md` instructions bundle and the install's secrets, install
token and ingest URL as environment variables, and the reporting plugin
(plugins/paperclip-reporter) posts their runs. Shapes follow the real server
(tests/fakes/paperclip_recorded/). See docs/platforms/orchA.md.
"""

from __future__ import annotations

from typing import Any

from config.catalogue import ORCH_A_MODELS
from plugins.builtin.orch_a_client import Client, agent_body, managers_first, ui_links
from plugins.builtin.orch_a_upgrade import upgrade
from plugins.hookspecs import hookimpl
from plugins.types import (
    CredentialField,
    DeployedAgent,
    DeprovisionContext,
    DeprovisionResult,
    HeartbeatContext,
    HeartbeatTask,
    PlatformCapabilities,
    PlatformError,
    PlatformInfo,
    PlatformTraits,
    ProvisionContext,
    ProvisionResult,
)

PLATFORM = "orchA"
RUN_ID_HEADER = "X-Paperclip-Run-Id"
REPORTER_PLUGIN = "svc.paperclip-reporter"
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


async def reporter_warning(client: Client) -> str | None:
    """A warning when the reporting plugin is not ready on this Paperclip (None when it is)."""
    how = (
        "install it with POST /api/plugins/install {packageName: <path to plugins/paperclip-reporter>, "
        "isLocalPath: true} (see docs/platforms/orchA.md)"
    )
    try:
        listed = await client.call("GET", "/api/plugins")
    except PlatformError as exc:
        return f"could not check for the reporting plugin {REPORTER_PLUGIN} ({exc.detail}); {how}"
    for plugin in listed.get("items", []):
        if isinstance(plugin, dict) and plugin.get("pluginKey") == REPORTER_PLUGIN:
            if plugin.get("status") == "ready":
                return None
            return f"the reporting plugin {REPORTER_PLUGIN} is {plugin.get('status')}: enable it in Paperclip"
    return f"local-adapter runs are not reported until the plugin {REPORTER_PLUGIN} is installed: {how}"


async def key_expiry_warning(client: Client, install_id: str) -> str | None:
    """When the board key expires (Paperclip's default is 30 days), so the deployer rotates it."""
    try:
        me = await client.call("GET", "/api/cli-auth/me")
        keys = await client.call("GET", "/api/board-api-keys")
    except PlatformError:
        return None  # informational only: never fail an install over it
    for key in keys.get("items", []):
        if isinstance(key, dict) and key.get("id") == me.get("keyId") and key.get("expiresAt"):
            return (
                f"the board key expires at {key['expiresAt']}: rotate it before then with "
                f'PATCH /api/installs/{install_id}/credentials {{"orchAApiKey": <new key>}}'
            )
    return None


@hookimpl
async def svc_provision(platform: str, context: ProvisionContext) -> ProvisionResult | None:
    """Create the company (if asked), then the agents, managers first; undo all on failure."""
    client = Client(context.credentials, context.allow_private)
    created: list[str] = []
    created_company: str | None = None
    try:
        company_id = context.options.get("companyId")
        if company_id:
            company = await client.call("GET", f"/api/companies/{company_id}")
        else:
            company = await client.call("POST", "/api/companies", {"name": context.options["companyName"]})
            if not isinstance(company.get("id"), str):
                raise PlatformError("orchA POST /api/companies answered without an id")
            company_id = created_company = company["id"]
        prefix = str(company.get("issuePrefix") or company_id)
        upstream_ids: dict[str, str] = {}
        deployed = []
        runtime_keys: dict[str, str] = {}
        local_agents = 0
        for agent in managers_first(context.definition["agents"]):
            body = agent_body(agent, context, upstream_ids)
            kind = body["adapterType"]
            agent_id = await client.create(f"/api/companies/{company_id}/agents", body)
            upstream_ids[agent["key"]] = agent_id
            created.append(agent_id)
            deployed.append(DeployedAgent(key=agent["key"], externalId=agent_id, name=agent["name"]))
            if context.on_created is not None:  # recorded at once: a crash from here leaves no orphan
                await context.on_created(deployed[-1])
            if kind == "http" and not context.options.get("webhookUrl"):
                # The runtime writes each run's outcome back to the issue as this agent.
                made = await client.call("POST", f"/api/agents/{agent_id}/keys", {"name": "svc-runtime"})
                if not isinstance(made.get("token"), str):
                    raise PlatformError(f"orchA POST /api/agents/{agent_id}/keys answered without a token")
                runtime_keys[agent_id] = made["token"]
            elif kind != "http":
                local_agents += 1
        warnings = []
        unmapped = sorted(
            {
                agent["name"]
                for agent in context.definition["agents"]
                if (context.options.get("model") or agent["model"]) not in ORCH_A_MODELS
                and (agent.get("adapterType") or context.options.get("adapterType")) != "http"
            }
        )
        if unmapped:
            warnings.append(
                "no Paperclip model is configured for the model of "
                + ", ".join(unmapped)
                + ": they run on their adapter's default model (config/models.json orchAModels)"
            )
        if local_agents:
            warning = await reporter_warning(client)
            if warning:
                warnings.append(warning)
        expiry = await key_expiry_warning(client, context.install_id)
        if expiry:
            warnings.append(expiry)
        return ProvisionResult(
            deployed_agents=tuple(deployed),
            platform_data=ui_links(client.base, prefix, deployed),
            warnings=tuple(warnings),
            state={
                "companyId": company_id,
                "createdCompany": created_company is not None,
                "runtimeKeys": runtime_keys,
            },
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
    """Pause every provisioned agent, then delete each, then the company the install created;
    failures become warnings, a refused key a 502.

    Pausing first stops Paperclip from waking an agent (an issue still assigned to it, its
    timer) while it is deleted: a run Paperclip starts meanwhile writes rows the delete is
    removing, and the delete then fails (seen as a rare 2-of-3 in the live test). A pause that
    fails is no reason not to try the delete."""
    client = Client(context.credentials, context.allow_private)
    deleted, warnings = 0, []
    try:
        leftovers = [DeployedAgent("leftover", i, "") for i in context.state.get("leftoverAgents") or []]
        everyone = (*context.deployed_agents, *leftovers)  # leftovers: refused deletes of upgrades
        for agent in everyone:
            try:
                await client.call("POST", f"/api/agents/{agent.externalId}/pause")
            except PlatformError as exc:
                if exc.denied:
                    raise
        for agent in everyone:
            try:
                await client.call("DELETE", f"/api/agents/{agent.externalId}")
                deleted += 1
            except PlatformError as exc:
                if exc.denied:
                    raise
                if exc.upstream_status == 404:
                    continue  # already gone
                warnings.append(f"agent {agent.key}: {exc.detail}")
        company_id = context.state.get("companyId")
        if context.state.get("createdCompany") and company_id and not warnings:
            try:
                await client.call("DELETE", f"/api/companies/{company_id}")
            except PlatformError as exc:
                if exc.upstream_status != 404:
                    warnings.append(f"company {company_id}: {exc.detail}")
    finally:
        await client.close()
    return DeprovisionResult(deleted_agents=deleted, warnings=tuple(warnings))


@hookimpl
async def svc_upgrade(platform: str, context: Any) -> Any:
    """An UpgradeContext: update, create and remove agents in place (plugins/builtin/orch_a_upgrade.py)."""
    return await upgrade(context)


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


@hookimpl
def svc_heartbeat_task(platform: str, context: HeartbeatContext) -> HeartbeatTask | None:
    """The issue a Paperclip heartbeat carries (context.paperclipIssue, the wake's issue, or the
    task markdown), else a generic wake-up text naming the reason."""
    payload = context.payload
    wake_context = found if isinstance(found := payload.get("context"), dict) else {}
    wake = found if isinstance(found := wake_context.get("paperclipWake"), dict) else {}
    issue = wake_context.get("paperclipIssue") or wake.get("issue")
    task = ""
    if isinstance(issue, dict) and (_text(issue.get("title")) or _text(issue.get("description"))):
        ref = _text(issue.get("identifier"))
        task = f"Issue {ref}: {_text(issue.get('title'))}" if ref else _text(issue.get("title"))
        if _text(issue.get("description")):
            task += f"\n\n{_text(issue.get('description'))}"
    task = task or _text(wake_context.get("paperclipTaskMarkdown"))
    task = task or _text(wake_context.get("task")) or _text(wake_context.get("prompt"))
    if not task:
        reason = _text(wake_context.get("wakeReason")) or "scheduled"
        task = f"Heartbeat from Paperclip (wake reason: {reason}). Do your work for this wake-up and report."
    task_id = _text(wake_context.get("issueId")) or _text(wake_context.get("taskId")) or None
    run_id = _text(payload.get("runId")) or None
    return HeartbeatTask(task=task, platform_run_id=run_id, platform_task_id=task_id)


@hookimpl
async def svc_heartbeat_finished(platform: str, context: HeartbeatContext) -> list[str] | None:
    """A completed run on an issue: its response as a comment and the issue `done`, written as the
    agent within Paperclip's run (X-Paperclip-Run-Id), so Paperclip sees the disposition it asks
    for. A failed run writes nothing: the runtime answers non-2xx and Paperclip fails the run."""
    outcome = context.outcome or {}
    wake_context = found if isinstance(found := context.payload.get("context"), dict) else {}
    issue_id = _text(wake_context.get("issueId")) or _text(wake_context.get("taskId"))
    run_id = _text(context.payload.get("runId"))
    key = (context.state.get("runtimeKeys") or {}).get(context.platform_agent_id)
    if outcome.get("status") != "completed" or not issue_id:
        return []
    if not key:
        return [f"no agent key stored for {context.agent_key}: the outcome is not written back"]
    client = Client({**context.credentials, "orchAApiKey": key}, context.allow_private)
    try:
        comment = _text(outcome.get("response")) or "Done (the agent gave no text)."
        await client.call(
            "PATCH",
            f"/api/issues/{issue_id}",
            {"status": "done", "comment": comment},
            headers={RUN_ID_HEADER: run_id} if run_id else None,
        )
    except PlatformError as exc:
        return [f"write-back to issue {issue_id} failed: {exc.detail}"]
    finally:
        await client.close()
    return []
