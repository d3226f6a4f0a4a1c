"""The plugin manager and its typed façade.

Built-in plugins are registered by module name, third-party ones are loaded from
the `svc.plugins` entry-point group, and any of them can be switched off by name
(SVC_DISABLED_PLUGINS). `check_pending()` refuses to start with a hook
implementation that matches no spec (a typo would otherwise be ignored). Callers
use the methods of `Plugins`, never `pm.hook`; coroutine results are awaited.
A platform hook is called on the plugin that declared the platform only (so
drivers need not check the platform id); provider hooks go newest first and the
first non-None *awaited* answer wins.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import inspect
import logging
import sys
from collections.abc import AsyncIterator, Iterable
from typing import Any, cast

import pluggy

from plugins import hookspecs
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
    ProviderError,
    ProviderInfo,
    ProvisionContext,
    ProvisionResult,
    RunReport,
    StreamChunk,
    UpgradeContext,
    UpgradeResult,
)

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "svc.plugins"
BUILTINS = (
    "plugins.builtin.svc_platform",
    "plugins.builtin.orch_a",
    "plugins.builtin.orch_b",
    "plugins.builtin.orch_c",
    "plugins.builtin.providers",
)
# What install actors load: they call models, never platform drivers (which import boto3).
PROVIDER_BUILTINS = ("plugins.builtin.providers",)


@functools.cache
def entry_points(path: tuple[str, ...]) -> tuple[importlib.metadata.EntryPoint, ...]:
    """The `svc.plugins` entry points installed on the import path `path`. Finding them reads
    every installed distribution's metadata (about 15 ms), so it is done once per process and
    path rather than once per plugin manager: a plugin installed while a process runs is found
    by its next start, as any newly installed module would be."""
    return tuple(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


class PluginError(RuntimeError):
    """The plugins are inconsistent (duplicate platform ids, a platform nobody drives)."""


class Plugins:
    """The loaded plugins, behind typed methods."""

    def __init__(self, disabled: Iterable[str] = (), builtins: Iterable[str] = BUILTINS) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        disabled = set(disabled)
        for name in disabled:
            self.pm.set_blocked(name)
        for name in builtins:
            if name not in disabled:
                self.pm.register(importlib.import_module(name), name=name)
        loaded = 0
        for entry in entry_points(tuple(sys.path)):
            if self.pm.get_plugin(entry.name) is None and not self.pm.is_blocked(entry.name):
                self.pm.register(entry.load(), name=entry.name)
                loaded += 1
        self.pm.check_pending()
        self._platforms: dict[str, PlatformInfo] = {}
        self._drivers: dict[str, object] = {}  # platform id -> the plugin that declared it
        # pluggy lists the oldest registration first; platforms are listed in registration order.
        for impl in self.pm.hook.svc_platforms.get_hookimpls():
            # pluggy types a hook implementation's answer as object; this hook's is a list.
            for info in cast(list[PlatformInfo], impl.function()):
                if info.id in self._platforms:
                    raise PluginError(f"platform {info.id!r} is provided by two plugins")
                self._platforms[info.id] = info
                self._drivers[info.id] = impl.plugin
        log.info(
            "plugins loaded",
            extra={"plugins": sorted(n for n, _ in self.pm.list_name_plugin()), "entryPoints": loaded,
                   "platforms": sorted(self._platforms)},
        )

    # ---- platforms -------------------------------------------------------------------

    def platforms(self) -> list[PlatformInfo]:
        """Every platform, in registration order."""
        return list(self._platforms.values())

    def platform(self, platform_id: str) -> PlatformInfo | None:
        """One platform by id."""
        return self._platforms.get(platform_id)

    async def validate_install(
        self, platform: str, fields: dict[str, Any], definition: dict[str, Any]
    ) -> list[str]:
        """The driver's objections to an install (empty when it has none)."""
        problems = await self._driver("svc_validate_install", platform=platform, fields=fields,
                                      definition=definition)
        return list(problems or [])

    async def provision(self, platform: str, context: ProvisionContext) -> ProvisionResult:
        """Create the team upstream."""
        return await self._required("svc_provision", platform=platform, context=context)

    async def deprovision(self, platform: str, context: DeprovisionContext) -> DeprovisionResult:
        """Remove the team upstream."""
        return await self._required("svc_deprovision", platform=platform, context=context)

    async def invoke(self, platform: str, context: InvokeContext) -> InvokeResult:
        """Send one input to a provisioned team."""
        return await self._required("svc_invoke", platform=platform, context=context)

    async def poll_runs(self, platform: str, context: PollContext) -> list[RunReport]:
        """Runs found upstream since a time (empty when the platform pushes its runs)."""
        return list(await self._driver("svc_poll_runs", platform=platform, context=context) or [])

    async def heartbeat_task(self, platform: str, context: HeartbeatContext) -> HeartbeatTask | None:
        """The task a heartbeat carries, as the platform's driver reads it (None: no reader)."""
        return await self._driver("svc_heartbeat_task", platform=platform, context=context)

    async def heartbeat_finished(self, platform: str, context: HeartbeatContext) -> list[str]:
        """Write a heartbeat's outcome back upstream; the problems met (empty when none)."""
        return list(await self._driver("svc_heartbeat_finished", platform=platform, context=context) or [])

    async def upgrade(self, platform: str, context: UpgradeContext) -> UpgradeResult:
        """Plan (dry run) or make an install's move to another version upstream; a platform
        whose driver does not implement `svc_upgrade` does not support it in place."""
        result = await self._driver("svc_upgrade", platform=platform, context=context)
        if result is None:
            return UpgradeResult(
                supported=False, reason=f"platform {platform} does not support upgrading an install in place"
            )
        return result

    # ---- LLM providers ---------------------------------------------------------------

    def providers(self) -> list[ProviderInfo]:
        """Every LLM provider the plugins declare."""
        return [p for result in reversed(self.pm.hook.svc_llm_providers()) for p in result]

    async def complete(self, provider: str, request: CompletionRequest) -> CompletionResponse:
        """One model call through the provider's plugin."""
        result = await self._first("svc_llm_complete", provider=provider, request=request)
        if result is None:
            raise ProviderError(f"no plugin serves provider {provider!r}")
        return result

    async def stream(self, provider: str, request: CompletionRequest) -> AsyncIterator[StreamChunk]:
        """A streamed model call through the provider's plugin."""
        result = await self._first("svc_llm_stream", provider=provider, request=request)
        if result is None:
            raise ProviderError(f"no plugin streams provider {provider!r}")
        return result

    # ---- calling ---------------------------------------------------------------------

    async def _first(self, name: str, **kwargs: Any) -> Any:
        """Call implementations newest first; the first non-None (awaited) answer wins."""
        caller = getattr(self.pm.hook, name)
        for impl in reversed(caller.get_hookimpls()):
            args = {arg: kwargs[arg] for arg in impl.argnames}
            result = impl.function(**args)
            if inspect.isawaitable(result):
                result = await result
            if result is not None:
                return result
        return None

    async def _driver(self, name: str, platform: str, **kwargs: Any) -> Any:
        """Call the hook on the plugin that declared `platform` (None if it does not implement it)."""
        driver = self._drivers.get(platform)
        for impl in getattr(self.pm.hook, name).get_hookimpls():
            if impl.plugin is driver:
                kwargs["platform"] = platform
                result = impl.function(**{arg: kwargs[arg] for arg in impl.argnames})
                return await result if inspect.isawaitable(result) else result
        return None

    async def _required(self, name: str, **kwargs: Any) -> Any:
        result = await self._driver(name, **kwargs)
        if result is None:
            raise PluginError(f"no plugin answered {name} for platform {kwargs.get('platform')!r}")
        return result
