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
import os
import re
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import boto3
import botocore.session
import httpx
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from config.catalogue import UPSTREAM
from plugins import egress
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
ENDPOINT_ENV = "SVC_ORCHC_ENDPOINT_URL"
MODEL_FAMILIES = ("providerA", "providerB")
MAX_COLLABORATORS = 10
REGION_RE = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
ROLE_ARN_PREFIX = "arn:aws:iam::"
CREDENTIAL_KEYS = ("accessKeyId", "secretAccessKey", "region", "agentResourceRoleArn")
INSTRUCTION_MIN, INSTRUCTION_MAX = 40, 4000  # Bedrock's limits on an agent's instruction
DESCRIPTION_MAX = 200
NAME_MAX = 100
ALIAS_NAME = "live"
DRAFT = "DRAFT"
POLL_INTERVAL = 1.0  # seconds between status reads while Bedrock creates or prepares
POLL_TIMEOUT = 180.0
MAX_ATTEMPTS = 3  # botocore's standard retry mode: throttling and 5xx are retried with backoff
CONTROL_READ_TIMEOUT, RUNTIME_READ_TIMEOUT = 60, 300

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


class UpstreamCallError(Exception):
    """One Bedrock operation failed; carries the operation, AWS error code, message and HTTP status."""

    def __init__(self, operation: str, code: str, message: str = "", status: int | None = None) -> None:
        super().__init__(f"{operation} failed: {code}")
        self.operation = operation
        self.code = code
        self.message = message
        self.status = status


@dataclass
class _Created:
    """An agent this provisioning call created (and its alias once it has one)."""

    key: str
    name: str
    agent_id: str
    alias_id: str | None = None
    alias_arn: str | None = None


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
            client, context, supervisor, model_override, warnings, created,
            collaboration="SUPERVISOR" if collaborators else "DISABLED",
        )
        for agent, entry in helpers:
            await _call(
                client, "associate_agent_collaborator",
                agentId=boss.agent_id, agentVersion=DRAFT,
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
                await _ignore_missing(_call(
                    client, "delete_agent_alias", agentId=target["agentId"], agentAliasId=target["aliasId"]
                ))
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
            _invoke_blocking, client, supervisor["agentId"], supervisor["aliasId"], session_id,
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
            agentId=agent_id, agentAliasId=alias_id, sessionId=session_id,
            inputText=input_text, enableTrace=True,
        )
        return assemble_completion(response["completion"])
    except ClientError as exc:
        raise _upstream_error("InvokeAgent", exc) from None
    except BotoCoreError as exc:
        raise UpstreamCallError("InvokeAgent", type(exc).__name__) from None


# ---------------------------------------------------------------------------------------
# Upstream calls
# ---------------------------------------------------------------------------------------


def _credentials(raw: Mapping[str, Any]) -> dict[str, str]:
    """The four credentials, or PlatformError naming the missing ones (never their values)."""
    missing = [k for k in CREDENTIAL_KEYS if not isinstance(raw.get(k), str) or not raw[k]]
    if missing:
        raise PlatformError(f"orchC credentials missing: {', '.join(missing)}")
    if not REGION_RE.match(raw["region"]):
        raise PlatformError("orchC credentials: region is not an AWS region")
    return {k: raw[k] for k in CREDENTIAL_KEYS}


async def _client(
    service: str,
    credentials: Mapping[str, str],
    allow_private: bool,
    read_timeout: int = CONTROL_READ_TIMEOUT,
) -> Any:
    """A boto3 client for the install's account and region, at the vetted override endpoint if set."""
    endpoint_url = os.environ.get(ENDPOINT_ENV) or None
    if endpoint_url:
        try:
            await egress.vet(httpx.URL(endpoint_url), allow_private)
        except (egress.EgressDenied, httpx.InvalidURL) as exc:
            raise PlatformError(f"orchC endpoint refused: {exc}") from None
    return await asyncio.to_thread(_build_client, service, credentials, endpoint_url, read_timeout)


def _build_client(
    service: str, credentials: Mapping[str, str], endpoint_url: str | None, read_timeout: int
) -> Any:
    """Build the client from the given credentials only (no profile, no ~/.aws files)."""
    core = botocore.session.Session(
        session_vars={
            "profile": (None, None, None, None),
            "config_file": (None, None, os.devnull, None),
            "credentials_file": (None, None, os.devnull, None),
        }
    )
    session = boto3.session.Session(
        botocore_session=core,
        aws_access_key_id=credentials["accessKeyId"],
        aws_secret_access_key=credentials["secretAccessKey"],
        region_name=credentials["region"],
    )
    config = Config(  # a fresh one per client: botocore edits the retries dict it is given
        retries={"mode": "standard", "total_max_attempts": MAX_ATTEMPTS},
        connect_timeout=10,
        read_timeout=read_timeout,
        ignore_configured_endpoint_urls=True,  # AWS_ENDPOINT_URL* must not bypass the egress guard
    )
    return session.client(service, endpoint_url=endpoint_url, config=config)


async def _call(client: Any, method: str, **kwargs: Any) -> dict[str, Any]:
    """One boto3 call in a worker thread; failures become UpstreamCallError."""
    operation = client.meta.method_to_api_mapping.get(method, method)
    try:
        return await asyncio.to_thread(getattr(client, method), **kwargs)
    except ClientError as exc:
        raise _upstream_error(operation, exc) from None
    except BotoCoreError as exc:
        raise UpstreamCallError(operation, type(exc).__name__) from None


async def _ignore_missing(call: Any) -> None:
    """Await a delete; an already deleted resource counts as deleted."""
    try:
        await call
    except UpstreamCallError as exc:
        if exc.code != "ResourceNotFoundException":
            raise


def _upstream_error(operation: str, exc: ClientError) -> UpstreamCallError:
    """The AWS error code, message and HTTP status of a ClientError."""
    error = exc.response.get("Error", {})
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return UpstreamCallError(operation, error.get("Code") or "Unknown", error.get("Message") or "", status)


def _platform_error(
    exc: UpstreamCallError, credentials: Mapping[str, str], *, with_message: bool = False
) -> PlatformError:
    """A short PlatformError for an upstream failure; the secret key is never part of it."""
    detail = f"orchC {exc.operation} failed: {exc.code}"
    if with_message and exc.message:
        detail = f"{detail}: {exc.message[:300]}"
    secret = credentials.get("secretAccessKey")
    if secret:
        detail = detail.replace(secret, "***")
    status = 403 if exc.code == "AccessDeniedException" else exc.status
    return PlatformError(detail, status, denied=exc.code == "AccessDeniedException")


async def _wait(
    client: Any, method: str, shape: str, field: str, done: set[str], **kwargs: Any
) -> dict[str, Any]:
    """Read a resource until its status is in `done`; FAILED or a timeout is an UpstreamCallError."""
    operation = client.meta.method_to_api_mapping.get(method, method)
    deadline = time.monotonic() + POLL_TIMEOUT
    while True:
        resource = (await _call(client, method, **kwargs))[shape]
        status = resource.get(field)
        if status in done:
            return resource
        if status == "FAILED":
            raise UpstreamCallError(operation, "StatusFailed")
        if time.monotonic() > deadline:
            raise UpstreamCallError(operation, f"Timeout({status})")
        await asyncio.sleep(POLL_INTERVAL)


async def _create_agent(
    client: Any,
    context: ProvisionContext,
    agent: Mapping[str, Any],
    model_override: str | None,
    warnings: list[str],
    created: list[_Created],
    *,
    collaboration: str = "DISABLED",
) -> _Created:
    """CreateAgent for one team agent, recorded in `created` at once so that rollback finds it."""
    key = agent["key"]
    model = model_override or agent.get("model") or ""
    request: dict[str, Any] = {
        "agentName": _name(f"svc-{context.install_id}-{key}"),
        "instruction": _instruction(agent, warnings),
        "foundationModel": UPSTREAM.get(model, model),
        "agentResourceRoleArn": context.credentials["agentResourceRoleArn"],
        "agentCollaboration": collaboration,
    }
    description = (agent.get("title") or agent.get("role") or "").strip()[:DESCRIPTION_MAX]
    if description:
        request["description"] = description
    response = await _call(client, "create_agent", **request)
    entry = _Created(key=key, name=agent.get("name") or key, agent_id=response["agent"]["agentId"])
    created.append(entry)
    await _wait(
        client, "get_agent", "agent", "agentStatus", {"NOT_PREPARED", "PREPARED"}, agentId=entry.agent_id
    )
    return entry


async def _prepare(client: Any, agent_id: str) -> None:
    """PrepareAgent and wait until the draft is prepared."""
    await _call(client, "prepare_agent", agentId=agent_id)
    await _wait(client, "get_agent", "agent", "agentStatus", {"PREPARED"}, agentId=agent_id)


async def _alias(client: Any, entry: _Created) -> None:
    """CreateAgentAlias (a new version from the prepared draft) and wait until it is ready."""
    response = await _call(client, "create_agent_alias", agentId=entry.agent_id, agentAliasName=ALIAS_NAME)
    alias = response["agentAlias"]
    entry.alias_id, entry.alias_arn = alias["agentAliasId"], alias["agentAliasArn"]
    await _wait(
        client, "get_agent_alias", "agentAlias", "agentAliasStatus", {"PREPARED"},
        agentId=entry.agent_id, agentAliasId=entry.alias_id,
    )


async def _rollback(client: Any, created: list[_Created]) -> None:
    """Best effort: delete every alias and agent this call created, newest first."""
    for entry in reversed(created):
        try:
            if entry.alias_id:
                await _ignore_missing(_call(
                    client, "delete_agent_alias", agentId=entry.agent_id, agentAliasId=entry.alias_id
                ))
            await _ignore_missing(
                _call(client, "delete_agent", agentId=entry.agent_id, skipResourceInUseCheck=True)
            )
        except UpstreamCallError as exc:
            log.warning(
                "orchC rollback left an agent behind",
                extra={"agentId": entry.agent_id, "operation": exc.operation, "code": exc.code},
            )


# ---------------------------------------------------------------------------------------
# Shapes
# ---------------------------------------------------------------------------------------


def _name(raw: str) -> str:
    """A Bedrock name (`([0-9a-zA-Z][_-]?){1,100}`) made from any text."""
    name = re.sub(r"[^0-9A-Za-z]+", "-", raw).strip("-")[:NAME_MAX].rstrip("-")
    return name or "agent"


def _instruction(agent: Mapping[str, Any], warnings: list[str]) -> str:
    """The agent's prompt as a Bedrock instruction: padded to 40 characters, cut at 4000."""
    prompt = (agent.get("prompt") or "").strip()
    if len(prompt) < INSTRUCTION_MIN:
        name = agent.get("name") or agent["key"]
        role = agent.get("title") or agent.get("role") or "member"
        prompt = f"{prompt} You are {name}, the {role} of this team; help the user within that role.".strip()
    if len(prompt) > INSTRUCTION_MAX:
        warnings.append(f"The prompt of agent {agent['key']} was cut to {INSTRUCTION_MAX} characters")
        prompt = prompt[:INSTRUCTION_MAX]
    return prompt


def _collaboration_instruction(agent: Mapping[str, Any]) -> str:
    """When the supervisor should hand work to this collaborator, from its title, role and capabilities."""
    name = agent.get("name") or agent["key"]
    about = ", ".join(p for p in (agent.get("title"), agent.get("role") and f"role {agent['role']}") if p)
    text = f"Delegate to {name}" + (f" ({about})" if about else "")
    if agent.get("capabilities"):
        text += f" for: {agent['capabilities']}"
    return text.strip()[:INSTRUCTION_MAX]


def _console_url(region: str, agent_id: str) -> str:
    """The Bedrock console page of an agent."""
    return f"https://{region}.console.aws.amazon.com/bedrock/home?region={region}#/agents/{agent_id}"


def _entry_state(entry: _Created) -> dict[str, Any]:
    """What deprovisioning and invocation need of one agent."""
    return {"key": entry.key, "name": entry.name, "agentId": entry.agent_id, "aliasId": entry.alias_id}


def _state_agents(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The supervisor first, then the collaborators, from a provisioning state."""
    targets = [state["supervisor"]] if state.get("supervisor") else []
    targets += list(state.get("agents") or [])
    return [t for t in targets if t.get("agentId")]
