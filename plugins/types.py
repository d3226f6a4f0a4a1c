"""The data that crosses the plugin boundary (public: third-party plugins import these).

Plain frozen dataclasses, so a plugin needs nothing beyond this package to use
them. Drivers raise `PlatformError` for upstream failures; the core turns it into
a 502 carrying the upstream status and a short detail (never credentials).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "ChatMessage",
    "CompletionRequest",
    "CompletionResponse",
    "CredentialField",
    "DeployedAgent",
    "DeprovisionContext",
    "DeprovisionResult",
    "HeartbeatContext",
    "HeartbeatTask",
    "InvokeContext",
    "InvokeResult",
    "PlatformCapabilities",
    "PlatformError",
    "PlatformInfo",
    "PlatformInputError",
    "PlatformTraits",
    "PollContext",
    "ProviderError",
    "ProviderInfo",
    "ProvisionContext",
    "ProvisionResult",
    "RunReport",
    "StreamChunk",
    "ToolCall",
    "ToolSpec",
]

# Install body fields a platform may accept beyond templateId, platform and the billing fields.
OPTIONAL_FIELDS = (
    "credentials", "variables", "secrets", "model",
    "companyId", "companyName", "adapterType", "webhookUrl", "cwd",
)


@dataclass(frozen=True)
class CredentialField:
    """One credential a deployer supplies for a platform."""

    key: str
    label: str
    type: Literal["text", "password"] = "text"
    required: bool = True


@dataclass(frozen=True)
class PlatformCapabilities:
    """What the platform can do; shown in GET /api/platforms."""

    maxHierarchyDepth: int | None = None
    supportedModels: tuple[str, ...] | None = None
    billingCompleteness: Literal["full", "none"] = "full"
    provisioningModel: str = "rest"


@dataclass(frozen=True)
class PlatformTraits:
    """How the core treats a platform's installs. The core reads these flags, never a platform id,
    so a third-party platform gets any of these behaviours without a core change.

    The defaults describe an external orchestrator that pushes its runs with token counts,
    keeps its agents when an install is cancelled, and takes no secrets.
    """

    managed: bool = False
    """Runs execute on the service's own runtime (run, webhook trigger, schedules, console)."""
    uses_secrets: bool = False
    """Install secrets reach the team: pre-filled from and remembered in the owner's vault."""
    secrets_updatable: bool = False
    """Secrets are read when a run starts, so PATCH /api/installs/:id/secrets takes effect."""
    heartbeats: bool = False
    """Its agents call POST /api/runtime/webhook, which runs them on the managed runtime."""
    polled: bool = False
    """Runs are fetched by the run poller (`svc_poll_runs`) instead of being pushed."""
    reports_tokens: bool = True
    """Run reports carry token counts (required for `per_k_tokens` templates when true)."""
    invokable: bool = False
    """POST /api/installs/:id/invoke sends input to the team (`svc_invoke`)."""
    deprovision_on_delete: bool = False
    """DELETE always removes the agents upstream, and the install's credentials are then dropped."""
    top_level_credentials: frozenset[str] = frozenset()
    """Credential keys the install body may also carry at its top level, with `companyName`."""
    flattens_hierarchy: bool = False
    """A team deeper than `capabilities.maxHierarchyDepth` is flattened by the driver (with a
    warning) instead of being refused at install time."""
    runs_mcp: bool = False
    """The team's MCP servers reach its agents there; when false the install answer warns which
    agents' MCP servers will not be available (docs/mcp.md)."""


@dataclass(frozen=True)
class PlatformInfo:
    """A platform a plugin provides. `accepts` names the optional install fields it takes;
    `capabilities` is what GET /api/platforms shows (its `maxHierarchyDepth` is enforced at
    install time); `traits` is how the core treats the platform's installs."""

    id: str
    label: str
    credential_fields: tuple[CredentialField, ...] = ()
    capabilities: PlatformCapabilities = field(default_factory=PlatformCapabilities)
    accepts: frozenset[str] = frozenset({"credentials", "variables"})
    listed: bool = True
    traits: PlatformTraits = field(default_factory=PlatformTraits)


@dataclass(frozen=True)
class DeployedAgent:
    """An agent as provisioned upstream."""

    key: str
    externalId: str
    name: str


@dataclass(frozen=True)
class ProvisionContext:
    """Everything a driver needs to provision one install.

    `definition` is the pinned team definition with install variables already
    interpolated into prompts. `install_token` is the `svc_install_…` token the
    platform should present to POST /api/runs/ingest. `runtime_webhook_url` and
    `webhook_secret` configure `http` agents that call our managed runtime.
    """

    install_id: str
    platform: str
    template: dict[str, Any]
    definition: dict[str, Any]
    credentials: dict[str, str]
    secrets: dict[str, str]
    options: dict[str, Any]
    install_token: str
    runtime_webhook_url: str
    webhook_secret: str
    ingest_url: str
    allow_private: bool = False
    # Awaited by a driver right after each upstream agent exists, before provisioning finishes:
    # the service records it first, so a crash or a cancelled request cannot orphan it.
    on_created: Callable[[DeployedAgent], Awaitable[None]] | None = None


@dataclass(frozen=True)
class ProvisionResult:
    """What provisioning created. `state` is kept (encrypted) for deprovisioning."""

    deployed_agents: tuple[DeployedAgent, ...]
    platform_data: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    state: dict[str, Any] = field(default_factory=dict)
    company_id: str | None = None


@dataclass(frozen=True)
class DeprovisionContext:
    """One install to remove upstream."""

    install_id: str
    platform: str
    credentials: dict[str, str]
    deployed_agents: tuple[DeployedAgent, ...]
    state: dict[str, Any]
    options: dict[str, Any]
    allow_private: bool = False


@dataclass(frozen=True)
class DeprovisionResult:
    """How many agents were deleted upstream, and what could not be."""

    deleted_agents: int
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class InvokeContext:
    """One proxied invocation of a provisioned team."""

    install_id: str
    platform: str
    credentials: dict[str, str]
    state: dict[str, Any]
    input_text: str
    session_id: str | None
    allow_private: bool = False


@dataclass(frozen=True)
class InvokeResult:
    """The reply of an invocation and its token counts."""

    text: str
    session_id: str
    agent_name: str
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True)
class PollContext:
    """One poll of a platform's run history since a time."""

    install_id: str
    platform: str
    credentials: dict[str, str]
    deployed_agents: tuple[DeployedAgent, ...]
    since: str | None
    allow_private: bool = False


@dataclass(frozen=True)
class HeartbeatContext:
    """One heartbeat of a platform's `http` agent, after the managed runtime ran it.

    `payload` is the heartbeat body exactly as the platform sent it; `state` and
    `credentials` are the install's (decrypted); `outcome` is the run's result
    (`status`, `response`, `errorMessage`, token counts) and is None before the run.
    """

    install_id: str
    platform: str
    agent_key: str
    platform_agent_id: str
    credentials: dict[str, str]
    state: dict[str, Any]
    payload: dict[str, Any]
    outcome: dict[str, Any] | None = None
    allow_private: bool = False


@dataclass(frozen=True)
class HeartbeatTask:
    """What a heartbeat asks the agent to do, and the upstream ids the run record keeps."""

    task: str
    platform_run_id: str | None = None
    platform_task_id: str | None = None


@dataclass(frozen=True)
class RunReport:
    """One run found upstream (the same fields as the ingest body)."""

    platformAgentId: str
    runId: str
    status: Literal["completed", "failed"]
    inputTokens: int | None = None
    outputTokens: int | None = None
    errorMessage: str | None = None
    # When the run last changed upstream (ISO 8601): the poller keeps the newest as its cursor.
    # Not part of equality: two reports of the same run are the same report.
    updatedAt: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class ProviderInfo:
    """An LLM provider and the catalogue models it serves."""

    id: str
    label: str
    wire_format: str
    models: tuple[str, ...]


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call; `parameters` is a JSON Schema object."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    """One tool call the model asked for."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ChatMessage:
    """One turn of a conversation, in a provider-neutral form.

    `assistant` turns may carry `tool_calls`; a `tool` turn answers the call
    `tool_call_id` (named `name`) with `content`.
    """

    role: Literal["user", "assistant", "tool"]
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class CompletionRequest:
    """One model call. `model` is the catalogue id, `upstream_model` the provider's own name."""

    model: str
    upstream_model: str
    system: str
    messages: tuple[ChatMessage, ...]
    api_key: str
    base_url: str
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int = 2048
    temperature: float | None = None
    timeout_s: float = 60.0
    max_retries: int = 3


@dataclass(frozen=True)
class CompletionResponse:
    """The model's answer: text and/or tool calls, and the upstream token counts."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0
    stop_reason: str | None = None


@dataclass(frozen=True)
class StreamChunk:
    """A piece of a streamed answer; the last one has `done` and the whole `response`."""

    text: str = ""
    done: bool = False
    response: CompletionResponse | None = None


class ProviderError(Exception):
    """A provider refused or failed; `detail` is safe to show (never the key)."""

    def __init__(self, detail: str, status: int | None = None, *, retryable: bool = False) -> None:
        super().__init__(detail)
        self.detail = detail
        self.status = status
        self.retryable = retryable


class PlatformError(Exception):
    """An upstream platform refused or failed. `detail` must not contain credentials."""

    def __init__(self, detail: str, upstream_status: int | None = None, *, denied: bool = False) -> None:
        super().__init__(detail)
        self.detail = detail
        self.upstream_status = upstream_status
        self.denied = denied


class PlatformInputError(PlatformError):
    """The caller's input cannot be used upstream (a base URL or region the egress guard
    refuses or cannot resolve): the client gets a 400 with `detail`, not a 502. The detail
    names the field, never how a host resolved."""
