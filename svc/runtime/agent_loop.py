"""The managed runtime's agent loop: a supervisor, delegation, and the `http_request` tool.

The supervisor (the root agent) gets the task and one `delegate_<key>` tool per
other agent, plus `http_request`. Each delegated agent runs its own loop with its
own prompt, model and access policy, and `http_request` only. Every loop stops
after MAX_ITERATIONS model calls. The supervisor's final text is the response.

Every `http_request` passes, in order: secret substitution (`${NAME}` in the URL
and header values only), the agent's access policy (the LLM judge for
`require_approval`, failing closed), then the egress guard, and is written to the
security log with the URL as the agent wrote it.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import httpx

from plugins import tracing
from plugins.egress import EgressDenied, egress_client
from plugins.types import ChatMessage, ProviderError, ToolCall, ToolSpec
from svc.core import iso, utcnow
from svc.runtime.llm import LLM
from svc.runtime.policy import CompiledPolicy, compile_policy, evaluate
from svc.runtime.security_log import RequestRecord, SecurityLog

log = logging.getLogger(__name__)

MAX_ITERATIONS = 10
MAX_BODY_CHARS = 8_000
HTTP_TIMEOUT_S = 30.0
JUDGE_TIMEOUT_S = 20.0
SECRET_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
DECISIONS = {"allow": "ALLOW", "deny": "BLOCK", "judge": "JUDGE", "passthrough": "PASSTHROUGH"}
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]

HTTP_TOOL = ToolSpec(
    name="http_request",
    description=(
        "Send an HTTP request to an external service. Write secrets as ${NAME}; they are filled in "
        "for the URL and headers. Returns the status code and the (possibly truncated) body."
    ),
    parameters={
        "type": "object",
        "properties": {
            "method": {"type": "string", "enum": METHODS},
            "url": {"type": "string"},
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "body": {"type": "string"},
        },
        "required": ["method", "url"],
    },
)
JUDGE_SYSTEM = (
    "You are a security judge for outbound HTTP requests made by an AI agent. Decide whether the request "
    "fits the agent's declared role and task. Answer with JSON only, no prose: "
    '{"decision": "allow" or "block", "reasoning": "<one sentence>", "confidence": <0 to 1>}.'
)


EventSink = Callable[[str, dict[str, Any]], None]


class AgentFailed(Exception):
    """An agent could not finish; the message is shown in the run record."""


@dataclass
class AgentStep:
    """One agent's loop within a run."""

    agent_key: str
    status: str = "completed"
    input_tokens: int = 0
    output_tokens: int = 0
    error: str | None = None
    output: str | None = None
    started_at: datetime = field(default_factory=utcnow)
    ended_at: datetime | None = None
    model: str | None = None
    iterations: int = 0


@dataclass
class TeamResult:
    """What a run produced."""

    status: str
    response: str | None
    agent: str
    input_tokens: int
    output_tokens: int
    steps: list[AgentStep]
    error: str | None = None
    # A failed run whose tokens are billed all the same: it was stopped by its token cap (spend caps).
    billable: bool = False


@dataclass(frozen=True)
class RunScope:
    """Where a run happens: its install, id, secrets and egress rule."""

    install_id: str
    run_id: str
    secrets: dict[str, str]
    allow_private: bool
    judge_model: str


def substitute(text: str, secrets: dict[str, str]) -> str:
    """`${NAME}` replaced by the secret's value (unknown names stay as written)."""
    return SECRET_REFERENCE.sub(lambda m: secrets.get(m.group(1), m.group(0)), text)


def compiled_policy(policy: dict[str, Any] | None) -> CompiledPolicy | None:
    """The agent's policy, compiled once per process (compiling costs milliseconds; runs repeat it)."""
    return None if policy is None else _compile(json.dumps(policy, sort_keys=True))


@functools.lru_cache(maxsize=512)
def _compile(policy_json: str) -> CompiledPolicy | None:
    return compile_policy(json.loads(policy_json))


def root_agent(definition: dict[str, Any]) -> dict[str, Any]:
    """The supervisor: the first agent that reports to nobody."""
    return next((a for a in definition["agents"] if not a.get("reportsTo")), definition["agents"][0])


def delegate_tool_name(key: str) -> str:
    """The delegate tool of an agent (tool names are at most 64 characters)."""
    return f"delegate_{key}"[:64]


class TeamRunner:
    """Runs teams and single agents."""

    def __init__(
        self,
        llm: LLM,
        security_log: SecurityLog,
        steps_sink: Callable[[AgentStep], Awaitable[None]] | None = None,
        on_step_start: Callable[[AgentStep], None] | None = None,
        *,
        events: EventSink | None = None,
        token_cap: int | None = None,
        tokens_used: int = 0,
    ) -> None:
        self.llm = llm
        self.security_log = security_log
        self.steps_sink = steps_sink
        self.on_step_start = on_step_start
        # The run's live events (svc/runtime/run_events.py): called, never awaited, so a slow
        # event write never slows the run.
        self.events = events
        # The install's per-run token cap (spend caps): checked before every model call.
        self.token_cap = token_cap
        self.capped = False  # set once the cap stopped a model call
        self.tokens_used = tokens_used

    async def run_team(self, scope: RunScope, definition: dict[str, Any], task: str) -> TeamResult:
        """The supervisor's loop, delegating to the other agents."""
        root = root_agent(definition)
        others = {delegate_tool_name(a["key"]): a for a in definition["agents"] if a is not root}
        tools = [
            ToolSpec(
                name=name,
                description=f"Delegate a task to {a['name']} ({a.get('title') or a.get('role') or 'agent'}). "
                f"{a.get('capabilities', '')}".strip(),
                parameters={
                    "type": "object",
                    "properties": {"task": {"type": "string"}},
                    "required": ["task"],
                },
            )
            for name, a in others.items()
        ]
        steps: list[AgentStep] = []

        async def delegate(call: ToolCall) -> str:
            agent = others[call.name]
            sub_task = str(call.arguments.get("task", ""))
            step = await self._run_agent(scope, agent, sub_task, [HTTP_TOOL], None, steps)
            if step.status == "failed":
                return f"{agent['name']} could not finish: {step.error}"
            return step.output or ""

        root_step = await self._run_agent(scope, root, task, [*tools, HTTP_TOOL], delegate, steps)
        total_in = sum(s.input_tokens for s in steps)
        total_out = sum(s.output_tokens for s in steps)
        if root_step.status == "failed":
            return TeamResult("failed", None, root["key"], total_in, total_out, steps, root_step.error)
        return TeamResult("completed", root_step.output, root["key"], total_in, total_out, steps)

    async def run_agent(self, scope: RunScope, agent: dict[str, Any], task: str) -> TeamResult:
        """One agent alone, with `http_request` only (the runtime webhook of orchA http agents)."""
        steps: list[AgentStep] = []
        step = await self._run_agent(scope, agent, task, [HTTP_TOOL], None, steps)
        response = step.output
        status = "completed" if step.status == "completed" else "failed"
        return TeamResult(
            status, response, agent["key"], step.input_tokens, step.output_tokens, steps, step.error
        )

    async def _run_agent(
        self,
        scope: RunScope,
        agent: dict[str, Any],
        task: str,
        tools: list[ToolSpec],
        delegate: Callable[[ToolCall], Awaitable[str]] | None,
        steps: list[AgentStep],
    ) -> AgentStep:
        """One agent's turn, as an `invoke_agent` span with its tokens (tracing, #33)."""
        with tracing.agent_span(agent["key"], agent["name"], agent.get("model"), scope.secrets) as span:
            step = await self._agent_turn(scope, agent, task, tools, delegate, steps)
            tracing.agent_finished(span, step.status, step.input_tokens, step.output_tokens, step.error)
            return step

    async def _agent_turn(
        self,
        scope: RunScope,
        agent: dict[str, Any],
        task: str,
        tools: list[ToolSpec],
        delegate: Callable[[ToolCall], Awaitable[str]] | None,
        steps: list[AgentStep],
    ) -> AgentStep:
        step = AgentStep(agent_key=agent["key"], model=agent.get("model"))
        steps.append(step)
        if self.on_step_start is not None:
            self.on_step_start(step)
        if self.events is not None:
            self.events("step_started", step_started(step))
        policy = compiled_policy(agent.get("accessPolicy"))
        messages: list[ChatMessage] = [ChatMessage("user", task)]
        try:
            for _ in range(MAX_ITERATIONS):
                self._check_token_cap()
                answer = await self.llm.complete(agent["model"], agent.get("prompt", ""), messages, tools)
                step.iterations += 1
                step.input_tokens += answer.input_tokens
                step.output_tokens += answer.output_tokens
                self.tokens_used += answer.input_tokens + answer.output_tokens
                if not answer.tool_calls:
                    step.output = answer.text
                    break
                messages.append(ChatMessage("assistant", answer.text, tool_calls=answer.tool_calls))
                for call in answer.tool_calls:
                    with tracing.tool_span(call.name, call.id, call.arguments) as span:  # tracing (#33)
                        if call.name == HTTP_TOOL.name:
                            output = await self._http_request(scope, agent, policy, call.arguments)
                        elif delegate is not None and call.name.startswith("delegate_"):
                            output = await delegate(call)
                        else:
                            output = f"Unknown tool {call.name!r}"
                        span.content("gen_ai.tool.call.result", output)
                    messages.append(ChatMessage("tool", output, tool_call_id=call.id, name=call.name))
            else:
                raise AgentFailed(f"Agent {agent['key']} did not finish within {MAX_ITERATIONS} iterations")
        except AgentFailed as exc:
            step.status, step.error = "failed", str(exc)
        except ProviderError as exc:
            step.status, step.error = "failed", f"Model provider error: {exc.detail}"
        except Exception as exc:  # never let one agent's bug lose the run record
            log.error("agent loop failed: %s", type(exc).__name__)  # the message may hold secrets
            step.status, step.error = "failed", f"Internal error in the agent loop ({type(exc).__name__})"
        step.ended_at = utcnow()
        if self.events is not None:
            self.events("step_finished", step_finished(step))
        if self.steps_sink is not None:
            await self.steps_sink(step)
        return step

    async def _logged(self, entry: RequestRecord) -> None:
        """Write a security-log entry, and tell the run's watchers about the tool call."""
        await self.security_log.record(entry)
        if self.events is not None:
            self.events("tool_call", tool_call(entry))

    def _check_token_cap(self) -> None:
        """At a step boundary (before a model call): stop the run once it has used its token cap.
        A delegate stopped here fails, and so does the supervisor at its next model call."""
        if self.token_cap is not None and self.tokens_used >= self.token_cap:
            self.capped = True  # the marker execution bills the run by (not the error's text)
            raise AgentFailed(
                f"Stopped at the run's token cap: {self.tokens_used} tokens used, cap {self.token_cap}"
            )

    # ---- http_request ------------------------------------------------------------------

    async def _http_request(
        self, scope: RunScope, agent: dict[str, Any], policy: CompiledPolicy | None, arguments: dict[str, Any]
    ) -> str:
        method = str(arguments.get("method", "GET")).upper()
        written_url = str(arguments.get("url", ""))
        raw_headers = arguments.get("headers") or {}
        body = arguments.get("body")
        if (
            method not in METHODS
            or not isinstance(raw_headers, dict)
            or not (body is None or isinstance(body, str))
        ):
            return "Invalid http_request: method must be an HTTP method, headers an object, body a string"
        headers = {str(k): str(v) for k, v in raw_headers.items()}
        url = substitute(written_url, scope.secrets)
        parts = urlsplit(written_url)
        started = time.perf_counter()

        def log(
            decision: str,
            source: str | None,
            reason: str | None,
            status: int | None,
            judge: tuple[str | None, float | None] = (None, None),
            report_only: bool = False,
        ) -> RequestRecord:
            return RequestRecord(
                installId=scope.install_id,
                agentKey=agent["key"],
                agentName=agent["name"],
                runId=scope.run_id,
                method=method,
                url=written_url,
                hostname=parts.hostname or "",
                path=parts.path or "/",
                decision=decision,
                decisionSource=source,
                reason=reason,  # type: ignore[arg-type]
                judgeReasoning=judge[0],
                judgeConfidence=judge[1],
                statusCode=status,
                latencyMs=int((time.perf_counter() - started) * 1000),
                reportOnly=report_only,
            )

        verdict = evaluate(policy, method, url)
        decision = DECISIONS[verdict.action]
        judge: tuple[str | None, float | None] = (None, None)
        source, reason = verdict.source, verdict.reason
        # Report mode: the decision is computed and logged as it would be enforced (reportOnly),
        # and the request goes ahead; one log entry carries both the decision and the outcome.
        reporting = policy is not None and policy.report_only
        would_block = verdict.action == "deny"
        if verdict.action == "judge":
            allowed, reasoning, confidence = await self._judge(
                scope, agent, method, written_url, verdict.reason
            )
            judge, source = (reasoning, confidence), "judge"
            if not allowed:
                would_block, reason = True, "Blocked by the security judge"
        tracing.policy_decision(  # the verdict on the tool call's span (tracing, #33)
            "denied" if would_block and not reporting else "reported" if would_block else "allowed",
            decision=decision,
            source=source,
            reason=reason,
            judge_reasoning=judge[0],
            judge_confidence=judge[1],
            method=method,
            url=written_url,
        )
        if would_block and not reporting:
            await self._logged(log(decision, source, reason, None, judge))
            if verdict.action == "deny":
                return f"Blocked by the access policy: {verdict.reason or 'not allowed'}"
            return f"Blocked by the security judge: {judge[0]}"
        report_only = reporting and would_block
        try:
            async with egress_client(scope.allow_private, timeout=HTTP_TIMEOUT_S) as client:
                response = await client.request(
                    method,
                    url,
                    headers=substitute_headers(headers, scope.secrets),
                    content=body.encode() if isinstance(body, str) else None,
                )
        except EgressDenied as exc:
            # The reason never names the host: the host may carry a substituted secret.
            await self._logged(log("BLOCK", source, f"Egress guard: {exc.reason}", None, judge))
            return f"Blocked: {exc.reason}"
        except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
            failure = f"Request failed: {type(exc).__name__}"
            await self._logged(log(decision, source, failure, None, judge, report_only))
            return failure
        await self._logged(log(decision, source, reason, response.status_code, judge, report_only))
        text = response.text
        truncated = len(text) > MAX_BODY_CHARS
        return json.dumps(
            {"status": response.status_code, "body": text[:MAX_BODY_CHARS], "truncated": truncated}
        )

    async def _judge(
        self, scope: RunScope, agent: dict[str, Any], method: str, url: str, reason: str | None
    ) -> tuple[bool, str, float | None]:
        """Ask the judge model; any failure blocks (fail closed)."""
        context = (
            f"Agent: {agent['name']} (role: {agent.get('role') or 'unspecified'}; "
            f"title: {agent.get('title') or 'unspecified'}; "
            f"capabilities: {agent.get('capabilities') or 'n/a'})\n"
            f"Request: {method} {url}\nRule: {reason or 'requires approval'}"
        )
        try:
            answer = await self.llm.complete(
                scope.judge_model,
                JUDGE_SYSTEM,
                [ChatMessage("user", context)],
                max_tokens=300,
                timeout_s=JUDGE_TIMEOUT_S,
            )
            verdict = json.loads(answer.text[answer.text.index("{") : answer.text.rindex("}") + 1])
            decision = str(verdict["decision"]).lower()
            confidence = float(verdict.get("confidence")) if verdict.get("confidence") is not None else None
            reasoning = str(verdict.get("reasoning") or "")
        except ProviderError as exc:
            return False, f"Judge unavailable: {exc.detail}", None
        except (ValueError, KeyError, TypeError):
            return False, "Judge answer could not be read; blocked", None
        return decision == "allow", reasoning, confidence


def substitute_headers(headers: dict[str, str], secrets: dict[str, str]) -> dict[str, str]:
    """Header values with secrets filled in."""
    return {name: substitute(value, secrets) for name, value in headers.items()}


# ---- what the run's watchers are told (svc/runtime/run_events.py) ----------------------


def step_started(step: AgentStep) -> dict[str, Any]:
    """A step has begun: which agent, on which model."""
    return {"agent": step.agent_key, "model": step.model, "startedAt": iso(step.started_at)}


def step_finished(step: AgentStep) -> dict[str, Any]:
    """A step has ended: its outcome, model calls, tokens and duration."""
    ended = step.ended_at or utcnow()
    return {
        "agent": step.agent_key,
        "model": step.model,
        "status": step.status,
        "iterations": step.iterations,
        "inputTokens": step.input_tokens,
        "outputTokens": step.output_tokens,
        "durationMs": int((ended - step.started_at).total_seconds() * 1000),
        "startedAt": iso(step.started_at),
        "error": step.error,
    }


def tool_call(entry: RequestRecord) -> dict[str, Any]:
    """An `http_request` and the access policy's decision (the URL as written, never with secrets)."""
    return {
        "agent": entry.agentKey,
        "tool": HTTP_TOOL.name,
        "method": entry.method,
        "url": entry.url,
        "decision": entry.decision,
        "decisionSource": entry.decisionSource,
        "reason": entry.reason,
        "reportOnly": entry.reportOnly,
        "statusCode": entry.statusCode,
        "latencyMs": entry.latencyMs,
    }
