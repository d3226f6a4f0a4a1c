"""A test chat whose root agent uses MCP servers: the agent's loop with its MCP tools, under its
access policy (docs/mcp.md, "Authoring").

The builder is testing a definition, not running an install: there are no consent records (every
tool the policy lets through is offered), no deployer secrets (`${NAME}` stays as written), no
approvals (a call under `require_approval` is not made, and the model is told why), and the
tools' results and verdicts travel in the stream as `{toolCall}` events instead of an install's
security log. The servers are reached from the API process through the same egress guard, the
agent's HTTP rules and the operator's catalogue as in runs; a catalogue server restricted to some
templates or orgs is not available here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from plugins import tracing
from plugins.types import ChatMessage
from svc.core import new_id
from svc.runtime import LLM, McpService, McpToolbox

Event = dict[str, Any]
MAX_ITERATIONS = 10


async def mcp_chat(
    llm: LLM,
    service: McpService,
    model: str,
    root: dict[str, Any],
    definition: dict[str, Any],
    messages: list[ChatMessage],
    max_tokens: int,
) -> AsyncIterator[Event]:
    """The root agent's answer, calling its MCP tools on the way: `{toolCall}` per call, then the
    answer as one `{chunk}` and `{done: true}` (or `{error}`)."""
    chat_id = new_id()
    run = service.run(
        scope_key=f"test-chat:{chat_id}",
        install_id="test-chat",
        run_id=chat_id,
        definition=definition,
        template={"id": None, "slug": None},
        owner=None,
        secrets={},
        consent_required=False,
    )
    run.approvals_enabled = False

    async def keep(_record: Any) -> None:
        """No install to log under: the stream carries each call instead."""

    calls: list[Event] = []
    box = McpToolbox(run, root, keep, lambda _kind, data: calls.append(data))
    conversation = list(messages)
    try:
        tools = await box.specs()
        for _ in range(MAX_ITERATIONS):
            answer = await llm.complete(
                model, root.get("prompt") or "", conversation, tools, max_tokens=max_tokens
            )
            if not answer.tool_calls:
                for event in calls:
                    yield {"toolCall": event}
                calls.clear()
                yield {"chunk": answer.text}
                yield {"done": True}
                return
            conversation.append(ChatMessage("assistant", answer.text, tool_calls=answer.tool_calls))
            for call in answer.tool_calls:
                if box.owns(call.name):
                    # Its verdict on a span of its own, not on the request's (tracing, #33).
                    with tracing.tool_span(call.name, call.id, call.arguments):
                        output = (await box.call(call.name, call.arguments)).output
                else:
                    output = f"Unknown tool {call.name!r}"
                conversation.append(ChatMessage("tool", output, tool_call_id=call.id, name=call.name))
            for event in calls:
                yield {"toolCall": event}
            calls.clear()
        yield {"error": f"The agent did not finish within {MAX_ITERATIONS} model calls"}
    finally:
        await run.aclose()
