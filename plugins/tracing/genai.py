"""GenAI spans of a run (semantic conventions pinned at `SEMCONV_VERSION`): the run
(`invoke_workflow`), each agent's turn (`invoke_agent`), each tool call (`execute_tool`) with its
access-policy decision, and one `chat` span per model-call attempt with its tokens.

The run span is found again deep inside the run (gate pauses, the billed amount) through a context
variable, so the code that learns those things needs no span object.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind
from opentelemetry.util.types import AttributeValue

from plugins.tracing.core import (
    MIN_SECRET_CHARS,
    OFF,
    OFF_SPAN,
    PROVIDER_NAMES,
    PURPOSE,
    RUN,
    SECRETS,
    STATE,
    Handle,
    context_of,
    masked,
    start,
    when_on,
)
from plugins.types import ChatMessage, CompletionResponse, ToolSpec

# ---- the run ---------------------------------------------------------------------------------


@when_on(OFF_SPAN)
def run_span(
    run_id: str,
    source: str | None,
    stored: Mapping[str, str] | None,
    *,
    retry_of: str | None = None,
    resumed_gate: str | None = None,
    bypass_gates: bool = False,
    adopted: bool = False,
) -> Iterator[Handle]:
    """One run (or, after a gate, its resumed part) in the install's actor: `invoke_workflow`.
    `adopted`: a new copy of the actor carries on the run from its journal after the one running
    it died (its journalled model and tool calls are replayed, not made again: no spans of theirs).

    Its parent is the context stored on the run when it was asked for (`stored`), so every part
    of a run, whichever process and command carried it, joins the caller's one trace; the command
    that carried it here (the current context, from `attached`) is its parent when it is of that
    same trace, else a link (a continue from another request)."""
    origin = context_of(stored)
    current = trace.get_current_span().get_span_context()
    parent, links = None, []
    if origin is not None and not (current.is_valid and current.trace_id == origin.trace_id):
        parent = trace.set_span_in_context(trace.NonRecordingSpan(origin), otel_context.Context())
        if current.is_valid:
            links.append(Link(current, {"svc.link": "resumed_by"}))
    attributes = {
        "gen_ai.operation.name": "invoke_workflow",
        "gen_ai.conversation.id": run_id,
        "svc.run.id": run_id,
        "svc.run.source": source,
        "svc.run.retry_of": retry_of,
    }
    with start("invoke_workflow", SpanKind.INTERNAL, attributes, parent, links) as span:
        if resumed_gate is not None:
            span.event("svc.gate.resumed", {"svc.gate.name": resumed_gate, "svc.gate.bypass": bypass_gates})
        if adopted:
            span.event("svc.run.adopted")
        token = RUN.set(span.span)
        try:
            yield span
        finally:
            RUN.reset(token)


def _run() -> Handle:
    return Handle(RUN.get()) if STATE.on else OFF


def run_install(
    install_id: str,
    template_id: str | None,
    template_version: int | None,
    workflow: str | None,
    platform: str,
) -> None:
    """Name the current run's install, template (id, version, name) and platform."""
    run = _run()
    run.set(
        {
            "svc.install.id": install_id,
            "svc.template.id": template_id,
            "svc.template.version": template_version,
            "svc.platform": platform,
            "gen_ai.workflow.name": workflow,
        }
    )
    if run.span is not None and workflow:
        run.span.update_name(f"invoke_workflow {workflow}")


def run_finished(status: str, input_tokens: int, output_tokens: int, error: str | None = None) -> None:
    """The current run's outcome and token totals (the run record's)."""
    run = _run()
    run.set(
        {
            "svc.run.status": status,
            "gen_ai.usage.input_tokens": input_tokens,
            "gen_ai.usage.output_tokens": output_tokens,
        }
    )
    if status == "failed":
        run.fail("run_failed", error)


def run_billed(pricing_model: str, amount_cents: int, price_cents: int | None) -> None:
    """What the current run is billed (svc.billing.run_cost's maths)."""
    _run().set(
        {
            "svc.billing.pricing_model": pricing_model,
            "svc.billing.amount_cents": amount_cents,
            "svc.billing.price_cents": price_cents,
        }
    )


def gate_paused(gate: str, next_step: int | None = None) -> None:
    """The current run stopped at a human gate (it resumes in a later part of the same trace)."""
    run = _run()
    run.set({"svc.run.status": "paused"})
    run.event("svc.gate.paused", {"svc.gate.name": gate, "svc.gate.next_step": next_step})


# ---- agents, tools, policy decisions ------------------------------------------------------------


@when_on(OFF_SPAN)
def agent_span(
    key: str,
    name: str,
    model: str | None,
    secrets: Mapping[str, str],
    pauses: tuple[type[BaseException], ...] = (),
) -> Iterator[Handle]:
    """One agent's turn (its loop of model and tool calls): `invoke_agent`. Strings recorded inside
    it are masked with the run's `secrets`; an exception of `pauses` is a gate, not a failure."""
    provider = (model or "").partition(":")[0]
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": PROVIDER_NAMES.get(provider, provider or "_OTHER"),
        "gen_ai.agent.id": key,
        "gen_ai.agent.name": name,
        "svc.agent.model": model,
    }
    values = tuple(sorted((v for v in secrets.values() if len(v) >= MIN_SECRET_CHARS), key=len, reverse=True))
    tokens = (SECRETS.set(values), PURPOSE.set("agent"))
    try:
        with start(f"invoke_agent {name}", SpanKind.INTERNAL, attributes, pauses=pauses) as span:
            yield span
    finally:
        PURPOSE.reset(tokens[1])
        SECRETS.reset(tokens[0])


def agent_finished(
    span: Handle, status: str, input_tokens: int, output_tokens: int, error: str | None
) -> None:
    """An agent's outcome and its tokens (its step record's)."""
    span.set({"gen_ai.usage.input_tokens": input_tokens, "gen_ai.usage.output_tokens": output_tokens})
    if status != "completed":
        span.fail("agent_failed", error)


@when_on(OFF_SPAN)
def tool_span(
    name: str, call_id: str | None, arguments: Any = None, pauses: tuple[type[BaseException], ...] = ()
) -> Iterator[Handle]:
    """One tool call: `execute_tool`. A model called inside it (the policy judge) is marked `judge`;
    an exception of `pauses` is a gate (a person settles the call), not a failure."""
    kind = (
        "delegate"
        if name.startswith("delegate_")
        else "http"
        if name == "http_request"
        else "mcp"
        if name.startswith("mcp__")
        else "other"
    )
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.type": "function",
        "svc.tool.kind": kind,
    }
    token = PURPOSE.set("judge")
    try:
        with start(f"execute_tool {name}", SpanKind.INTERNAL, attributes, pauses=pauses) as span:
            span.content("gen_ai.tool.call.arguments", arguments)
            yield span
    finally:
        PURPOSE.reset(token)


def policy_decision(
    outcome: str,
    *,
    decision: str | None = None,
    source: str | None = None,
    reason: str | None = None,
    judge_reasoning: str | None = None,
    judge_confidence: float | None = None,
    method: str | None = None,
    url: str | None = None,
) -> None:
    """One access-policy decision about the current tool call: attributes on its span and one
    `svc.policy.decision` event. `outcome` is one of OUTCOMES; `decision` and `source` are the
    security log's (ALLOW/BLOCK/JUDGE/PASSTHROUGH; rule/default/judge); `url` as the agent wrote
    it (secrets unfilled), recorded without its query unless content capture is on."""
    if not STATE.on:
        return
    span = Handle(trace.get_current_span())
    shown = masked(url) if url is not None else None
    if shown is not None and not STATE.capture:
        shown = shown.split("?", 1)[0].split("#", 1)[0]
    attributes = {
        "svc.policy.outcome": outcome,
        "svc.policy.decision": decision,
        "svc.policy.source": source,
        "svc.policy.reason": masked(reason) if reason else None,
        "svc.policy.judge.reasoning": masked(judge_reasoning) if judge_reasoning else None,
        "svc.policy.judge.confidence": judge_confidence,
        "http.request.method": method,
        "url.full": shown,
    }
    span.set(attributes)
    span.event("svc.policy.decision", attributes)
    if outcome in ("denied", "approval_refused"):
        span.fail("policy_denied", reason)


# ---- model calls ---------------------------------------------------------------------------


class ChatAttempt:
    """One attempt of one model call: a `chat` span started by `chat_attempt`, ended by
    `succeeded` (with its tokens) or `failed`. `current()` makes it the parent of the HTTP span."""

    def __init__(self, span: trace.Span | None) -> None:
        self.handle = Handle(span)
        self._span = span

    def current(self) -> AbstractContextManager[Any]:
        """The attempt as the current span (the HTTP request under it)."""
        return OFF_SPAN if self._span is None else trace.use_span(self._span, end_on_exit=False)

    def prompt(self, system: str, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]) -> None:
        """The request's content (recorded only with content capture on)."""
        if self.handle.span is None or not STATE.capture:
            return
        self.handle.content("gen_ai.system_instructions", [{"type": "text", "content": system}])
        self.handle.content("gen_ai.input.messages", [_message(m) for m in messages])
        self.handle.content(
            "gen_ai.tool.definitions",
            [{"type": "function", "name": t.name, "description": t.description} for t in tools],
        )

    def succeeded(self, response: CompletionResponse) -> None:
        """The answer's tokens and finish reason (and, with content capture, its text)."""
        if self._span is None:
            return
        self.handle.set(
            {
                "gen_ai.usage.input_tokens": response.input_tokens,
                "gen_ai.usage.output_tokens": response.output_tokens,
                "gen_ai.response.finish_reasons": [response.stop_reason] if response.stop_reason else None,
            }
        )
        if STATE.capture and self.handle.span is not None:
            parts: list[dict[str, Any]] = (
                [{"type": "text", "content": response.text}] if response.text else []
            )
            parts += [
                {"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments}
                for c in response.tool_calls
            ]
            self.handle.content("gen_ai.output.messages", [{"role": "assistant", "parts": parts}])
        self._end()

    def failed(self, error_type: str, description: str | None = None, retried: bool = False) -> None:
        """The attempt failed (`retried`: another attempt follows); nothing once it has ended."""
        if self._span is None:
            return
        self.handle.fail(error_type, description)
        self.handle.set({"svc.llm.retried": retried})
        self._end()

    def _end(self) -> None:
        """End the span once."""
        if self._span is not None:
            self._span.end()
            self._span = None


def _message(message: ChatMessage) -> dict[str, Any]:
    """A ChatMessage in the GenAI input-messages schema."""
    if message.role == "tool":
        return {
            "role": "tool",
            "parts": [
                {"type": "tool_call_response", "id": message.tool_call_id, "response": message.content}
            ],
        }
    parts: list[dict[str, Any]] = [{"type": "text", "content": message.content}] if message.content else []
    parts += [
        {"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments}
        for c in message.tool_calls
    ]
    return {"role": message.role, "parts": parts}


OFF_ATTEMPT = ChatAttempt(None)


def chat_attempt(
    provider: str, model: str, upstream_model: str, attempt: int, max_tokens: int, server: str | None = None
) -> ChatAttempt:
    """Start the `chat` span of one attempt (0 for the first) of a model call."""
    if not STATE.on:
        return OFF_ATTEMPT
    host, _, port = (server or "").partition("://")[2].split("/", 1)[0].partition(":")
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": PROVIDER_NAMES.get(provider, provider),
        "gen_ai.request.model": upstream_model,
        "gen_ai.request.max_tokens": max_tokens,
        "svc.llm.model": model,
        "svc.llm.attempt": attempt + 1,
        "svc.llm.purpose": PURPOSE.get(),
        "server.address": host or None,
        "server.port": int(port) if port.isdigit() else None,
    }
    span = STATE.tracer.start_span(
        f"chat {upstream_model}",
        kind=SpanKind.CLIENT,
        attributes={k: v for k, v in attributes.items() if v is not None},
    )
    return ChatAttempt(span)
