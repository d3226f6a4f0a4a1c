"""The built-in LLM providers: three upstream wire formats over httpx (docs/providers.md).

- providerA speaks the Anthropic Messages API (`POST {base}/v1/messages`),
- providerB speaks OpenAI Chat Completions (`POST {base}/chat/completions`),
- providerC speaks Gemini generateContent (`POST {base}/v1beta/models/{model}:generateContent`).

The API key and base URL come in the request (the core reads them from settings).
429, 5xx and connection failures are retried with exponential backoff; the key never
appears in an error or a log line, even when the upstream echoes it back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from plugins.builtin.providers.anthropic import AnthropicMessages
from plugins.builtin.providers.gemini import GeminiGenerate
from plugins.builtin.providers.openai import OpenAIChat
from plugins.builtin.providers.transport import check, chunks_of, complete, prepend
from plugins.builtin.providers.wire import Wire, catalogue_models
from plugins.hookspecs import hookimpl
from plugins.types import CompletionRequest, CompletionResponse, ProviderInfo, StreamChunk

PROVIDERS: dict[str, tuple[str, Wire]] = {
    "providerA": ("Provider A (Anthropic Messages API)", AnthropicMessages()),
    "providerB": ("Provider B (OpenAI Chat Completions)", OpenAIChat()),
    "providerC": ("Provider C (Gemini generateContent)", GeminiGenerate()),
}


# ---- hooks ----------------------------------------------------------------------------


@hookimpl
def svc_llm_providers() -> list[ProviderInfo]:
    """providerA, providerB and providerC with their catalogue models."""
    return [
        ProviderInfo(id=pid, label=label, wire_format=wire.wire_format, models=catalogue_models(pid))
        for pid, (label, wire) in PROVIDERS.items()
    ]


@hookimpl
async def svc_llm_complete(provider: str, request: CompletionRequest) -> CompletionResponse | None:
    """One call with retries; None when the provider is not one of ours."""
    entry = PROVIDERS.get(provider)
    if entry is None:
        return None
    return await complete(provider, entry[1], request)


@hookimpl
async def svc_llm_stream(provider: str, request: CompletionRequest) -> AsyncIterator[StreamChunk] | None:
    """A streamed call, connected (with retries) and read up to its first chunk before returning."""
    entry = PROVIDERS.get(provider)
    if entry is None:
        return None
    check(provider, request)
    chunks = chunks_of(provider, entry[1], request)
    try:
        first = await anext(chunks)
    except BaseException:
        await chunks.aclose()
        raise
    return prepend(first, chunks)
