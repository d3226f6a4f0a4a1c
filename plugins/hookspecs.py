"""The plugin contract: every hook a plugin may implement.

A plugin is a module (or object) with functions marked `@hookimpl` whose names
and parameters match the specs below; it may implement any subset. Third-party
plugins ship a package with an entry point in group `svc.plugins`. A hook may be
a plain function or a coroutine function; the host awaits coroutines. A platform
hook is called only on the plugin whose `svc_platforms` declared that platform,
with the platform id first (useful to a plugin that declares several). How the
core treats a platform's installs is said by `PlatformInfo.traits`, not by its id.
See docs/plugins.md for the guide.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pluggy

from plugins.types import (
    CompletionRequest,
    CompletionResponse,
    DeprovisionContext,
    DeprovisionResult,
    HeartbeatContext,
    HeartbeatTask,
    InvokeContext,
    InvokeResult,
    PlatformInfo,
    PollContext,
    ProviderInfo,
    ProvisionContext,
    ProvisionResult,
    RunReport,
    StreamChunk,
    UpgradeContext,
    UpgradeResult,
)

PROJECT = "svc"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

# ---------------------------------------------------------------------------------------
# Platforms
# ---------------------------------------------------------------------------------------


@hookspec
def svc_platforms() -> list[PlatformInfo]:
    """Called at start-up: the platforms this plugin provides (every plugin's lists are joined)."""


@hookspec(firstresult=True)
def svc_validate_install(
    platform: str, fields: dict[str, Any], definition: dict[str, Any]
) -> list[str] | None:
    """Called before provisioning: problems with the install for your platform (empty list: none).

    `fields` holds the install body's platform fields (credentials, model, companyId, ...);
    `definition` is the team definition.
    """


@hookspec(firstresult=True)
def svc_provision(platform: str, context: ProvisionContext) -> ProvisionResult | None:
    """Called on POST /api/installs: create the team upstream; return what was created.

    Raise `PlatformError` on an upstream failure, after deleting whatever this call
    created (nothing is stored for a failed install).
    """


@hookspec(firstresult=True)
def svc_deprovision(platform: str, context: DeprovisionContext) -> DeprovisionResult | None:
    """Called on DELETE /api/installs/:id: remove what provisioning created.

    Report agents that could not be deleted in `warnings`; raise `PlatformError` with
    `denied=True` when the stored credentials may not delete.
    """


@hookspec(firstresult=True)
def svc_invoke(platform: str, context: InvokeContext) -> InvokeResult | None:
    """Called on POST /api/installs/:id/invoke: send one input to the team and return its reply."""


@hookspec(firstresult=True)
def svc_poll_runs(platform: str, context: PollContext) -> list[RunReport] | None:
    """Called by the run poller for platforms without push reporting: runs since `context.since`."""


@hookspec(firstresult=True)
def svc_heartbeat_task(platform: str, context: HeartbeatContext) -> HeartbeatTask | None:
    """Called on POST /api/runtime/webhook before the run: the task the heartbeat carries."""


@hookspec(firstresult=True)
def svc_heartbeat_finished(platform: str, context: HeartbeatContext) -> list[str] | None:
    """Called after a heartbeat's run, before answering the platform: write the outcome back
    upstream (a comment, a status). Returns problems worth logging (empty when all went well)."""


@hookspec(firstresult=True)
def svc_upgrade(platform: str, context: UpgradeContext) -> UpgradeResult | None:
    """Called when an install moves to another version (an upgrade or a rollback): first with
    `context.dry_run` true for the plan (say what you would update, create and remove; change
    nothing), then false to make the team upstream match `context.definition`.

    On a failure, undo what this call changed and raise `PlatformError`: the install stays on its
    version. Return `UpgradeResult(supported=False, reason=...)` when the change cannot be made
    in place. Default (no implementation): the platform does not support upgrades in place, and
    such upgrades are refused before anything changes.
    """


# ---------------------------------------------------------------------------------------
# LLM providers
# ---------------------------------------------------------------------------------------


@hookspec
def svc_llm_providers() -> list[ProviderInfo]:
    """Called at start-up: the LLM providers this plugin serves and their catalogue models."""


@hookspec(firstresult=True)
def svc_llm_complete(provider: str, request: CompletionRequest) -> CompletionResponse | None:
    """Called for one model call (with tools): the whole answer. Return None when not yours.

    Raise `ProviderError` on failure, after your own retries of 429 and 5xx answers.
    """


@hookspec(firstresult=True)
def svc_llm_stream(provider: str, request: CompletionRequest) -> AsyncIterator[StreamChunk] | None:
    """Called for a streamed model call: an async iterator of chunks, the last with `done`.

    Return None when the provider is not yours.
    """
