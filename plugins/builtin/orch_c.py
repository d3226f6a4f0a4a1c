"""The `orchC` platform driver: Amazon Bedrock Agents through boto3 (see docs/platforms/orchC.md).

The supervisor (root agent) gets every other agent as a collaborator, so the team is
one level deep. Every boto3 call runs in a worker thread; a client is built per call
from the install's credentials, pointed at SVC_ORCHC_ENDPOINT_URL when that is set
(after the egress guard has vetted it).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from plugins.builtin.orch_c_bedrock import (
    CREDENTIAL_KEYS,
    DRAFT,
    INSTRUCTION_MAX,
    MAX_COLLABORATORS,
    MODEL_FAMILIES,
    REGION_RE,
    ROLE_ARN_PREFIX,
    RUNTIME_READ_TIMEOUT,
    UpstreamCallError,
    _alias,
    _call,
    _client,
    _collaboration_instruction,
    _console_url,
    _create_agent,
    _Created,
    _credentials,
    _entry_state,
    _ignore_missing,
    _name,
    _platform_error,
    _prepare,
    _rollback,
    _state_agents,
    _upstream_error,
)
from plugins.hookspecs import hookimpl
from plugins.types import (
    CredentialField,
    DeployedAgent,
    DeprovisionContext,
    DeprovisionResult,
    InvokeContext,
    InvokeResult,
    PlatformCapabilities,
    PlatformError,
    PlatformInfo,
    PlatformTraits,
    ProvisionContext,
    ProvisionResult,
)

log = logging.getLogger(__name__)

PLATFORM = "orchC"

INFO = PlatformInfo(
    id=PLATFORM,
    label="Amazon Bedrock Agents",
    credential_fields=(
        CredentialField("accessKeyId", "Access key ID", "text"),
        CredentialField("secretAccessKey", "Secret access key", "password"),
        CredentialField("region", "Region", "text"),
        CredentialField("agentResourceRoleArn", "Agent resource role ARN", "text"),
    ),
    capabilities=PlatformCapabilities(
        maxHierarchyDepth=1,
        supportedModels=MODEL_FAMILIES,
        billingCompleteness="full",
        provisioningModel="rest",
    ),
    accepts=frozenset({"credentials", "variables", "model"}),
    traits=PlatformTraits(
        uses_secrets=True, invokable=True, deprovision_on_delete=True, flattens_hierarchy=True
    ),
)


# ---------------------------------------------------------------------------------------
# Hooks
# ---------------------------------------------------------------------------------------


@hookimpl
def svc_platforms() -> list[PlatformInfo]:
    """Amazon Bedrock Agents."""
    return [INFO]


@hookimpl
def svc_validate_install(
    platform: str, fields: dict[str, Any], definition: dict[str, Any]
) -> list[str] | None:
    """Credentials, region, role ARN, model families and the collaborator limit."""
    problems: list[str] = []
    credentials = fields.get("credentials")
    if not isinstance(credentials, Mapping):
        credentials = {}
    for key in CREDENTIAL_KEYS:
        value = credentials.get(key)
        if not isinstance(value, str) or not value.strip():
            problems.append(f"credentials.{key} is required for orchC")
    region = credentials.get("region")
    if isinstance(region, str) and region and not REGION_RE.match(region):
        problems.append(f"credentials.region {region!r} is not an AWS region (for example us-east-1)")
    role = credentials.get("agentResourceRoleArn")
    if isinstance(role, str) and role and not role.startswith(ROLE_ARN_PREFIX):
        problems.append(f"credentials.agentResourceRoleArn must be an IAM role ARN ({ROLE_ARN_PREFIX}...)")
    agents = definition.get("agents") or []
    if not agents:
        problems.append("orchC needs at least one agent")
    override = fields.get("model")
    for agent in agents:
        model = override or agent.get("model")
        if not isinstance(model, str) or not model.startswith(MODEL_FAMILIES):
            problems.append(
                f"agent {agent.get('key')!r}: model {model!r} is not supported on orchC "
                f"(model families: {', '.join(MODEL_FAMILIES)})"
            )
        if len(agent.get("prompt") or "") > INSTRUCTION_MAX:
            problems.append(
                f"agent {agent.get('key')!r}: orchC prompts are at most {INSTRUCTION_MAX} characters"
            )
    if len(agents) - 1 > MAX_COLLABORATORS:
        problems.append(f"orchC supports at most {MAX_COLLABORATORS} collaborator agents")
    return problems


@hookimpl
async def svc_provision(platform: str, context: ProvisionContext) -> ProvisionResult | None:
    """Create every collaborator (agent, prepare, alias), then the supervisor that calls them."""
    credentials = _credentials(context.credentials)
    agents: list[dict[str, Any]] = list(context.definition.get("agents") or [])
    if not agents:
        raise PlatformError("orchC: the team has no agents")
    supervisor = next((a for a in agents if not a.get("reportsTo")), agents[0])
    collaborators = [a for a in agents if a is not supervisor]
    warnings: list[str] = []
    if any(a.get("reportsTo") != supervisor["key"] for a in collaborators):
        warnings.append(
            "Hierarchy flattened: orchC supports one level, so every agent reports to the supervisor "
            f"{supervisor['key']}"
        )
    model_override = context.options.get("model")
    client = await _client("bedrock-agent", credentials, context.allow_private)
    created: list[_Created] = []
    try:
        for agent in collaborators:
            entry = await _create_agent(client, context, agent, model_override, warnings, created)
            await _prepare(client, entry.agent_id)
            await _alias(client, entry)
        helpers = list(zip(collaborators, created, strict=True))
        boss = await _create_agent(
            client,
            context,
            supervisor,
            model_override,
            warnings,
            created,
            collaboration="SUPERVISOR" if collaborators else "DISABLED",
        )
        for agent, entry in helpers:
            await _call(
                client,
                "associate_agent_collaborator",
                agentId=boss.agent_id,
                agentVersion=DRAFT,
                agentDescriptor={"aliasArn": entry.alias_arn},
                collaboratorName=_name(agent["key"]),
                collaborationInstruction=_collaboration_instruction(agent),
            )
        await _prepare(client, boss.agent_id)
        await _alias(client, boss)
    except Exception as exc:
        await _rollback(client, created)
        if isinstance(exc, UpstreamCallError):
            raise _platform_error(exc, credentials) from None
        raise
    region = credentials["region"]
    by_key = {entry.key: entry for entry in created}
    deployed = tuple(
        DeployedAgent(key=a["key"], externalId=by_key[a["key"]].agent_id, name=a.get("name") or a["key"])
        for a in agents
    )
    return ProvisionResult(
        deployed_agents=deployed,
        platform_data={
            "dashboardUrl": _console_url(region, boss.agent_id),
            "agentUrls": [{"name": d.name, "url": _console_url(region, d.externalId)} for d in deployed],
        },
        warnings=tuple(warnings),
        state={
            "region": region,
            "agents": [_entry_state(by_key[a["key"]]) for a in collaborators],
            "supervisor": _entry_state(boss),
        },
    )


@hookimpl
async def svc_deprovision(platform: str, context: DeprovisionContext) -> DeprovisionResult | None:
    """Delete every alias, then its agent; access denied is an error, anything else a warning."""
    credentials = _credentials(context.credentials)
    targets = _state_agents(context.state)
    if not targets:  # no stored state: fall back to the deployed agents (DeleteAgent drops aliases too)
        targets = [{"key": a.key, "agentId": a.externalId, "aliasId": None} for a in context.deployed_agents]
    client = await _client("bedrock-agent", credentials, context.allow_private)
    deleted = 0
    warnings: list[str] = []
    for target in targets:
        try:
            if target.get("aliasId"):
                await _ignore_missing(
                    _call(
                        client,
                        "delete_agent_alias",
                        agentId=target["agentId"],
                        agentAliasId=target["aliasId"],
                    )
                )
            await _ignore_missing(
                _call(client, "delete_agent", agentId=target["agentId"], skipResourceInUseCheck=True)
            )
            deleted += 1
        except UpstreamCallError as exc:
            if exc.code == "AccessDeniedException":
                raise _platform_error(exc, credentials, with_message=True) from None
            warnings.append(
                f"agent {target.get('key')} ({target['agentId']}) was not deleted: "
                f"{exc.operation} failed: {exc.code}"
            )
    return DeprovisionResult(deleted_agents=deleted, warnings=tuple(warnings))


@hookimpl
async def svc_invoke(platform: str, context: InvokeContext) -> InvokeResult | None:
    """Send the input to the supervisor's alias and assemble the streamed reply."""
    credentials = _credentials(context.credentials)
    supervisor = context.state.get("supervisor") or {}
    if not supervisor.get("agentId") or not supervisor.get("aliasId"):
        raise PlatformError("orchC: this install has no supervisor alias to invoke")
    session_id = context.session_id or uuid.uuid4().hex
    client = await _client("bedrock-agent-runtime", credentials, context.allow_private, RUNTIME_READ_TIMEOUT)
    try:
        text, input_tokens, output_tokens = await asyncio.to_thread(
            _invoke_blocking,
            client,
            supervisor["agentId"],
            supervisor["aliasId"],
            session_id,
            context.input_text,
        )
    except UpstreamCallError as exc:
        raise _platform_error(exc, credentials, with_message=exc.code == "AccessDeniedException") from None
    return InvokeResult(
        text=text,
        session_id=session_id,
        agent_name=supervisor.get("name") or supervisor.get("key") or "",
        input_tokens=input_tokens,
        output_tokens=output_tokens,
    )


# ---------------------------------------------------------------------------------------
# Invocation stream
# ---------------------------------------------------------------------------------------


def assemble_completion(events: Iterable[Mapping[str, Any]]) -> tuple[str, int, int]:
    """The reply text and summed token usage of an InvokeAgent `completion` event stream."""
    parts: list[str] = []
    usage = [0, 0]
    for event in events:
        chunk = event.get("chunk")
        if isinstance(chunk, Mapping) and chunk.get("bytes") is not None:
            data = chunk["bytes"]
            if isinstance(data, str):  # a raw JSON payload carries base64 text
                data = base64.b64decode(data)
            parts.append(data.decode("utf-8", errors="replace"))
        trace = event.get("trace")
        if isinstance(trace, Mapping):
            _sum_usage(trace, usage)
    return "".join(parts), usage[0], usage[1]


def _sum_usage(node: Any, usage: list[int]) -> None:
    """Add every `metadata.usage` found anywhere in a trace to `usage` ([input, output])."""
    if isinstance(node, Mapping):
        metadata = node.get("metadata")
        if isinstance(metadata, Mapping) and isinstance(metadata.get("usage"), Mapping):
            usage[0] += int(metadata["usage"].get("inputTokens") or 0)
            usage[1] += int(metadata["usage"].get("outputTokens") or 0)
        for key, value in node.items():
            if key != "metadata":
                _sum_usage(value, usage)
    elif isinstance(node, list):
        for item in node:
            _sum_usage(item, usage)


def _invoke_blocking(
    client: Any, agent_id: str, alias_id: str, session_id: str, input_text: str
) -> tuple[str, int, int]:
    """InvokeAgent and read its whole event stream (blocking: run in a thread)."""
    try:
        response = client.invoke_agent(
            agentId=agent_id,
            agentAliasId=alias_id,
            sessionId=session_id,
            inputText=input_text,
            enableTrace=True,
        )
        return assemble_completion(response["completion"])
    except ClientError as exc:
        raise _upstream_error("InvokeAgent", exc) from None
    except BotoCoreError as exc:
        raise UpstreamCallError("InvokeAgent", type(exc).__name__) from None


# ---------------------------------------------------------------------------------------
