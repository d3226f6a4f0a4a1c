"""orchC's Bedrock calls: clients, waits, agent creation, aliases, rollback, names and state."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import boto3
import botocore.session
import httpx
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from config.catalogue import BEDROCK
from plugins import egress
from plugins.types import (
    DeployedAgent,
    PlatformError,
    ProvisionContext,
)

log = logging.getLogger(__name__)


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
        "foundationModel": BEDROCK.get(model, model),
        "agentResourceRoleArn": context.credentials["agentResourceRoleArn"],
        "agentCollaboration": collaboration,
    }
    description = (agent.get("title") or agent.get("role") or "").strip()[:DESCRIPTION_MAX]
    if description:
        request["description"] = description
    response = await _call(client, "create_agent", **request)
    entry = _Created(key=key, name=agent.get("name") or key, agent_id=response["agent"]["agentId"])
    created.append(entry)
    if context.on_created is not None:  # recorded at once: a crash from here leaves no orphan
        await context.on_created(DeployedAgent(key=key, externalId=entry.agent_id, name=entry.name))
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
        client,
        "get_agent_alias",
        "agentAlias",
        "agentAliasStatus",
        {"PREPARED"},
        agentId=entry.agent_id,
        agentAliasId=entry.alias_id,
    )


async def _rollback(client: Any, created: list[_Created]) -> None:
    """Best effort: delete every alias and agent this call created, newest first."""
    for entry in reversed(created):
        try:
            if entry.alias_id:
                await _ignore_missing(
                    _call(client, "delete_agent_alias", agentId=entry.agent_id, agentAliasId=entry.alias_id)
                )
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
