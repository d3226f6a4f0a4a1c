"""Model calls by catalogue id: pick the provider plugin, its upstream name, key and endpoint."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from config.settings import Settings
from plugins.manager import Plugins
from plugins.types import (
    ChatMessage,
    CompletionRequest,
    CompletionResponse,
    ProviderError,
    StreamChunk,
    ToolSpec,
)
from svc.core import MetricChange, counter_increment

# Where counter changes go (svc/core/metric_counters.py: `write` bound to a store, or `Buffered`).
Count = Callable[[list[MetricChange | None]], Awaitable[None]]

DEFAULT_BASE_URLS = {
    "providerA": "https://api.anthropic.com",
    "providerB": "https://api.openai.com/v1",
    "providerC": "https://generativelanguage.googleapis.com",
}


class ProviderNotConfigured(ProviderError):
    """The model's provider has no key: the service is unavailable for it, not the upstream at fault."""


class LLM:
    """Calls models through the provider plugins with the keys and endpoints from settings."""

    def __init__(self, plugins: Plugins, settings: Settings, count: Count | None = None) -> None:
        self.plugins = plugins
        self.settings = settings
        # Where the tokens each provider used are counted for GET /metrics (None: not counted):
        # written at once in an API process, held and written once a second in an actor.
        self.count = count

    def request(
        self,
        model: str,
        system: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        max_tokens: int = 2048,
        timeout_s: float = 60.0,
    ) -> tuple[str, CompletionRequest]:
        """The provider id and the request for a catalogue model."""
        provider, _, _ = model.partition(":")
        config = self.settings.providers.get(provider)
        if config is None or not config.api_key:
            raise ProviderNotConfigured(f"{provider} is not configured (set SVC_{provider.upper()}_API_KEY)")
        upstream = self.settings.upstream_models.get(model)
        if upstream is None:
            raise ProviderError(f"unknown model {model!r}")
        return provider, CompletionRequest(
            model=model,
            upstream_model=upstream,
            system=system,
            messages=tuple(messages),
            api_key=config.api_key,
            base_url=(config.base_url or DEFAULT_BASE_URLS[provider]).rstrip("/"),
            tools=tuple(tools),
            max_tokens=max_tokens,
            timeout_s=timeout_s,
        )

    async def complete(
        self,
        model: str,
        system: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        max_tokens: int = 2048,
        timeout_s: float = 60.0,
    ) -> CompletionResponse:
        """One call, the whole answer."""
        provider, request = self.request(model, system, messages, tools, max_tokens, timeout_s)
        response = await self.plugins.complete(provider, request)
        if self.count is not None:  # both kinds in one write
            await self.count(
                [
                    counter_increment("llm_tokens", {"provider": provider, "kind": kind}, amount or 0)
                    for kind, amount in (("input", response.input_tokens), ("output", response.output_tokens))
                ]
            )
        return response

    async def stream(
        self, model: str, system: str, messages: Sequence[ChatMessage], max_tokens: int = 4096
    ) -> AsyncIterator[StreamChunk]:
        """A streamed call."""
        provider, request = self.request(model, system, messages, (), max_tokens)
        return await self.plugins.stream(provider, request)
