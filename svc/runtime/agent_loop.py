"""The managed runtime's agent loop: a supervisor, delegation, and the agents' tools.

The supervisor (the root agent) gets the task and one `delegate_<key>` tool per other agent,
plus `http_request`. Each delegated agent runs its own loop with its own prompt, model and
access policy, and `http_request` only. Every loop stops after MAX_ITERATIONS model calls. The
supervisor's final text is the response.

Every model call and tool call goes through the run's journal (svc/runtime/journal.py): what an
earlier attempt of the run recorded is answered from it (a resumed run never repeats a completed
call, nor counts its tokens twice), and what is new is recorded before the run acts on it. A tool
call whose outcome a crash left unknown, or that a person must settle, stops the run at a gate
(`GateReached`); the run resumes from the journal once the gate is decided.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

from bson import ObjectId
from pymongo.errors import PyMongoError

from plugins import tracing
from plugins.types import ChatMessage, CompletionResponse, ProviderError, ToolCall, ToolSpec
from svc.core import Conflict, utcnow
from svc.runtime.http_tool import HTTP_TOOL, INVALID, HttpTool, Outcome, Request, tool_event
from svc.runtime.journal import (
    ReplayMismatch,
    RunRecorder,
    RunTaken,
    cut,
    delegate_path,
    model_key,
    tool_key,
)
from svc.runtime.llm import LLM
from svc.runtime.mcp_run import McpRun
from svc.runtime.mcp_tools import McpToolbox
from svc.runtime.steps import (
    AgentStep,
    TeamResult,
    agent_entry,
    answer_from,
    step_finished,
    step_from,
    step_started,
)

log = logging.getLogger(__name__)

MAX_ITERATIONS = 10
OUTCOME_UNKNOWN = "outcome-unknown"
APPROVAL = "tool-approval"
REFUSED_BY_OPERATOR = "Refused by the operator"
CANCELLED = "Run cancelled"
UNKNOWN = "An earlier attempt may have been made: its outcome is unknown"


class AgentFailed(Exception):
    """An agent could not finish; the message is shown in the run record."""


class GateReached(Exception):
    """The run must stop at a gate in the middle of an agent's loop (a tool call a person must
    settle); `call` says which call and why, for the console and the resume."""

    def __init__(self, gate: str, call: dict[str, Any]) -> None:
        super().__init__(gate)
        self.gate = gate
        self.call = call
        # Where the run resumes (a pipeline names its step and that step's input).
        self.resume: dict[str, Any] = {}


@dataclass(frozen=True)
class RunScope:
    """Where a run happens: its install, id, secrets and egress rule."""

    install_id: str
    run_id: str
    secrets: dict[str, str]
    allow_private: bool
    judge_model: str


def root_agent(definition: dict[str, Any]) -> dict[str, Any]:
    """The supervisor: the first agent that reports to nobody."""
    return next((a for a in definition["agents"] if not a.get("reportsTo")), definition["agents"][0])


def delegate_tool_name(key: str) -> str:
    """The delegate tool of an agent (tool names are at most 64 characters)."""
    return f"delegate_{key}"[:64]


def delegate_tool(agent: dict[str, Any]) -> ToolSpec:
    kind = agent.get("title") or agent.get("role") or "agent"
    return ToolSpec(
        name=delegate_tool_name(agent["key"]),
        description=f"Delegate a task to {agent['name']} ({kind}). {agent.get('capabilities', '')}".strip(),
        parameters={"type": "object", "properties": {"task": {"type": "string"}}, "required": ["task"]},
    )


Delegate = Callable[[ToolCall, str], Awaitable[str]]


class TeamRunner:
    """Runs teams and single agents for one run, through its recorder."""

    def __init__(
        self,
        llm: LLM,
        recorder: RunRecorder,
        *,
        admit: Callable[[], Awaitable[None]] | None = None,
        token_cap: int | None = None,
        mcp: McpRun | None = None,
    ) -> None:
        self.llm = llm
        # The run's MCP tools (svc/runtime/mcp_run.py), when its team declares MCP servers.
        self.mcp = mcp
        self.recorder = recorder
        # Spend caps: asked before every model call; raises Conflict when the cap is reached.
        self.admit = admit
        # The install's per-run token cap (spend caps): checked before every model call.
        self.token_cap = token_cap
        self.capped = False  # set once the cap stopped a model call
        self.refusal: Conflict | None = None  # the spend cap's refusal of a model call

    async def run_team(self, scope: RunScope, definition: dict[str, Any], task: str) -> TeamResult:
        """The supervisor's loop, delegating to the other agents."""
        root = root_agent(definition)
        others = {delegate_tool_name(a["key"]): a for a in definition["agents"] if a is not root}
        steps: list[AgentStep] = []

        async def delegate(call: ToolCall, at: str) -> str:
            agent = others[call.name]
            task = str(call.arguments.get("task", ""))
            step = await self._invoke(scope, agent, task, delegate_path(at, agent["key"]), None, steps)
            if step.status == "failed":
                return f"{agent['name']} could not finish: {step.error}"
            return step.output or ""

        tools = [delegate_tool(a) for a in others.values()]
        root_step = await self._invoke(scope, root, task, root["key"], (tools, delegate), steps)
        return self._result(root["key"], root_step, steps)

    async def run_agent(
        self, scope: RunScope, agent: dict[str, Any], task: str, path: str | None = None
    ) -> TeamResult:
        """One agent alone, with `http_request` only (a pipeline step, or an orchA heartbeat)."""
        steps: list[AgentStep] = []
        step = await self._invoke(scope, agent, task, path or agent["key"], None, steps)
        return self._result(agent["key"], step, steps)

    @staticmethod
    def _result(key: str, last: AgentStep, steps: list[AgentStep]) -> TeamResult:
        total_in = sum(s.input_tokens for s in steps)
        total_out = sum(s.output_tokens for s in steps)
        if last.status == "failed":
            return TeamResult("failed", None, key, total_in, total_out, steps, last.error)
        return TeamResult("completed", last.output, key, total_in, total_out, steps)

    # ---- one agent invocation ----------------------------------------------------------------

    async def _invoke(
        self,
        scope: RunScope,
        agent: dict[str, Any],
        task: str,
        path: str,
        delegation: tuple[list[ToolSpec], Delegate] | None,
        steps: list[AgentStep],
    ) -> AgentStep:
        """Run one agent's loop at `path` (or read its end from the journal when it finished before)."""
        finished = self.recorder.journal.get("agent", path)
        if finished is not None:
            step = step_from(finished)
            steps.append(step)
            return step
        # The turn, made in this attempt of the run, as an `invoke_agent` span with its step's tokens
        # (tracing, #33); a turn the journal holds whole is replayed above without one.
        model, pauses = agent.get("model"), (GateReached,)
        with tracing.agent_span(agent["key"], agent["name"], model, scope.secrets, pauses) as span:
            step = await self._turn(scope, agent, task, path, delegation, steps)
            tracing.agent_finished(span, step.status, step.input_tokens, step.output_tokens, step.error)
            return step

    async def _turn(
        self,
        scope: RunScope,
        agent: dict[str, Any],
        task: str,
        path: str,
        delegation: tuple[list[ToolSpec], Delegate] | None,
        steps: list[AgentStep],
    ) -> AgentStep:
        """One agent's loop of model and tool calls, its journalled calls replayed."""
        recorder = self.recorder
        step = AgentStep(agent_key=agent["key"], path=path, model=agent.get("model"))
        steps.append(step)
        parent, recorder.current_agent = recorder.current_agent, agent["key"]
        first = recorder.journal.get("model", model_key(path, 0))
        if first is None:
            recorder.emit("step_started", step_started(step))
        elif isinstance(first.get("task"), str):
            task = first["task"]  # resumed: the conversation starts as it did the first time
        tools = [*(delegation[0] if delegation else []), HTTP_TOOL]
        # What the MCP toolbox logs (each call, each tool it could not offer) goes into the journal.
        toolbox = (
            McpToolbox(self.mcp, agent, self._journal_log(path), recorder.emit)
            if self.mcp is not None
            else None
        )
        http = HttpTool(
            self.llm,
            scope.install_id,
            scope.run_id,
            agent,
            scope.secrets,
            scope.allow_private,
            scope.judge_model,
        )
        messages: list[ChatMessage] = [ChatMessage("user", task)]
        try:
            if toolbox is not None:
                tools = [*tools, *await toolbox.specs()]
            for n in range(MAX_ITERATIONS):
                answer = await self._model(agent, step, path, n, messages, tools)
                if not answer.tool_calls:
                    step.output = answer.text
                    break
                messages.append(ChatMessage("assistant", answer.text, tool_calls=answer.tool_calls))
                for j, call in enumerate(answer.tool_calls):
                    output = await self._tool(http, delegation, path, n, j, call, toolbox)
                    messages.append(ChatMessage("tool", output, tool_call_id=call.id, name=call.name))
            else:
                raise AgentFailed(f"Agent {agent['key']} did not finish within {MAX_ITERATIONS} iterations")
        except AgentFailed as exc:
            step.status, step.error = "failed", str(exc)
        except ProviderError as exc:
            step.status, step.error = "failed", f"Model provider error: {exc.detail}"
        except (GateReached, RunTaken, ReplayMismatch, PyMongoError):
            raise  # not the agent's failure: the run stops as such (svc/runtime/install_runner.py)
        except asyncio.CancelledError:
            # cancel-run: the invocation in progress ends as cancelled (recorded with the run's end).
            step.status, step.error, step.ended_at = "failed", CANCELLED, utcnow()
            recorder.note({**agent_entry(step), "cancelled": True})
            recorder.emit("step_finished", step_finished(step))
            raise
        except Exception as exc:
            log.error("agent loop failed: %s", type(exc).__name__)  # the message may hold secrets
            step.status, step.error = "failed", f"Internal error in the agent loop ({type(exc).__name__})"
        finally:
            recorder.current_agent = parent
        step.ended_at = utcnow()
        recorder.note(agent_entry(step))
        recorder.emit("step_finished", step_finished(step))
        return step

    async def _model(
        self,
        agent: dict[str, Any],
        step: AgentStep,
        path: str,
        n: int,
        messages: list[ChatMessage],
        tools: list[ToolSpec],
    ) -> CompletionResponse:
        """The n-th model call of this invocation: from the journal, or made and journalled."""
        recorder = self.recorder
        key = model_key(path, n)
        recorded = recorder.journal.get("model", key)
        if recorded is not None:
            if recorded.get("agent") != agent["key"]:
                raise ReplayMismatch(
                    f"Cannot resume the run: step {key} was not made by agent {agent['key']}"
                )
            step.iterations += 1
            step.input_tokens += int(recorded.get("in") or 0)
            step.output_tokens += int(recorded.get("out") or 0)
            return answer_from(recorded)
        if recorder.replay_only:
            raise ReplayMismatch(f"The recording cannot answer model call {key} (agent {agent['key']})")
        await recorder.flush()  # everything the run decided so far is stored before it spends more
        self._check_token_cap()
        if self.admit is not None:
            try:
                await self.admit()
            except Conflict as exc:  # the spend cap: no model call; the agent (and the run) fails
                self.refusal = exc
                raise AgentFailed(exc.message) from None
        attempt = recorder.journal.attempts(key) + 1
        if recorder.resumed:  # the call this crash interrupted, if it was a model call: it is lost
            recorder.resumed = False
            recorder.note({"kind": "lost", "key": key, "agent": agent["key"], "attempt": attempt})
            attempt += 1
        started = time.perf_counter()
        answer = await self.llm.complete(agent["model"], agent.get("prompt", ""), messages, tools)
        step.iterations += 1
        step.input_tokens += answer.input_tokens
        step.output_tokens += answer.output_tokens
        recorder.tokens(answer.input_tokens, answer.output_tokens)
        recorder.note(
            {
                "kind": "model",
                "key": key,
                "agent": agent["key"],
                "model": agent.get("model"),
                "attempt": attempt,
                "text": cut(answer.text),
                "toolCalls": [
                    {"id": c.id, "name": c.name, "arguments": c.arguments} for c in answer.tool_calls
                ],
                "in": answer.input_tokens,
                "out": answer.output_tokens,
                "ms": int((time.perf_counter() - started) * 1000),
            }
        )
        return answer

    async def _tool(
        self,
        http: HttpTool,
        delegation: tuple[list[ToolSpec], Delegate] | None,
        path: str,
        n: int,
        j: int,
        call: ToolCall,
        toolbox: McpToolbox | None = None,
    ) -> str:
        """The j-th tool call of the n-th answer: from the journal, or made and journalled."""
        recorder = self.recorder
        key = tool_key(path, n, j)
        recorded = recorder.journal.get("tool", key)
        # A replayed eval case's recorded request is judged again by the definition under test:
        # the policy decides (and is logged), and only an allowed request gets the recorded answer.
        replayed = recorded is not None and bool(recorded.get("recording")) and call.name == HTTP_TOOL.name
        if recorded is not None and not replayed:
            return str(recorded.get("output") or "")
        resumed, recorder.resumed = recorder.resumed, False
        record = None
        # The call, made in this attempt of the run, as an `execute_tool` span with the access
        # policy's verdict (tracing, #33); a call the journal answered is replayed above without one.
        with tracing.tool_span(call.name, call.id, call.arguments, (GateReached,)) as span:
            if replayed:
                request = Request.parse(call.arguments)
                answer = str((recorded or {}).get("output") or "")
                outcome = await http.call(request, key, replayed=answer) if request else INVALID
                output, record = outcome.output, outcome.record
            elif call.name == HTTP_TOOL.name:
                outcome = await self._http(http, key, call, in_flight=resumed)
                output, record = outcome.output, outcome.record
            elif toolbox is not None and toolbox.owns(call.name):
                output = await self._mcp(toolbox, http, key, call)  # logged by the toolbox itself
            elif delegation is not None and call.name in {t.name for t in delegation[0]}:
                await recorder.flush()
                output = await delegation[1](call, key)
            else:
                output = f"Unknown tool {call.name!r}"
            span.content("gen_ai.tool.call.result", output)
        entry: dict[str, Any] = {"kind": "tool", "key": key, "agent": http.agent["key"], "name": call.name}
        entry["output"] = cut(output)
        if record is not None:
            entry["security"] = asdict(record)
            entry["securityId"] = f"{http.run_id}:{key}"
            entry["timelineId"] = str(ObjectId())
            recorder.emit("tool_call", tool_event(record))
        recorder.note(entry)
        return output

    async def _http(self, http: HttpTool, key: str, call: ToolCall, in_flight: bool) -> Outcome:
        """`http_request`, with what a crash or a person decided about an earlier attempt of it."""
        recorder = self.recorder
        request = Request.parse(call.arguments)
        if request is None:
            return INVALID
        await recorder.flush()
        sent_before = recorder.journal.get("sending", key) is not None
        decision = recorder.journal.decision(key)
        if sent_before and not request.idempotent:
            if decision is not None:
                if decision["decision"] == "done":
                    return Outcome(decision.get("note") or "The operator marked this request as done", None)
                if decision["decision"] == "fail":
                    raise AgentFailed(
                        f"The operator failed the run at an unknown outcome ({request.method} {request.url})"
                    )
            elif not resend_allowed(http, request):
                tracing.policy_decision("unknown", reason=UNKNOWN)  # on the tool call's span (#33)
                raise GateReached(OUTCOME_UNKNOWN, unknown_call(http, key, request))

        async def mark() -> None:
            if not request.idempotent and not sent_before:
                recorder.note({"kind": "sending", "key": key, "agent": http.agent["key"]})
                await recorder.flush()

        return await http.call(request, key, before_send=mark)

    def _journal_log(self, path: str) -> Callable[[Any], Awaitable[None]]:
        """The MCP toolbox's log sink for one invocation: each entry it logs (a call, a tool it
        could not offer) is journalled with the run, and stored by its settlement."""
        recorder = self.recorder

        async def log(record: Any) -> None:
            key = f"{path}/log{len(recorder.log)}"
            entry = {"kind": "log", "key": key, "agent": record.agentKey, "security": asdict(record)}
            recorder.note({**entry, "securityId": f"{record.runId}:{key}", "timelineId": str(ObjectId())})

        return log

    async def _mcp(self, toolbox: McpToolbox, http: HttpTool, key: str, call: ToolCall) -> str:
        """An MCP tool call: the policy, the judge or a person's approval, the call (svc/runtime/
        mcp_tools.py). A call that needs an approval stops the run at a `tool-approval` gate; once
        a person decided, the run's replay reaches this call again and the decision is applied. A
        call is marked before it is made, so one a crash cut off is never made twice unasked."""
        recorder = self.recorder
        decision = recorder.journal.decision(key)
        if decision is not None and decision.get("approvalId"):
            await toolbox.run.service.approvals.decide_once(
                http.install_id, decision["approvalId"], decision["decision"], decision.get("by")
            )
        if recorder.journal.get("sending", key) is not None:
            if decision is None:
                tracing.policy_decision("unknown", reason=UNKNOWN)  # on the tool call's span (#33)
                raise GateReached(
                    OUTCOME_UNKNOWN, {"key": key, "agent": http.agent["key"], "tool": call.name}
                )
            if decision["decision"] == "done":
                return str(decision.get("note") or "The operator marked this call as done")
            if decision["decision"] == "fail":
                raise AgentFailed(f"The operator failed the run at an unknown outcome ({call.name})")
        recorder.note({"kind": "sending", "key": key, "agent": http.agent["key"]})
        await recorder.flush()
        outcome = await toolbox.call(call.name, call.arguments)
        if outcome.approval is not None:
            approval = outcome.approval
            raise GateReached(
                APPROVAL,
                {
                    "key": key,
                    "agent": http.agent["key"],
                    "tool": call.name,
                    "arguments": outcome.event.get("arguments") if outcome.event else None,
                    "approvalId": approval.approval_id,
                    "digest": approval.digest,
                    "description": approval.description,
                },
            )
        return outcome.output

    def _check_token_cap(self) -> None:
        """At a step boundary (before a model call): stop the run once it has used its token cap.
        A delegate stopped here fails, and so does the supervisor at its next model call."""
        used = self.recorder.totals.input + self.recorder.totals.output
        if self.token_cap is not None and used >= self.token_cap:
            self.capped = True  # the marker execution bills the run by (not the error's text)
            raise AgentFailed(f"Stopped at the run's token cap: {used} tokens used, cap {self.token_cap}")


def resend_allowed(http: HttpTool, request: Request) -> bool:
    """Whether the matching rule says its target deduplicates by `Idempotency-Key`, so an
    attempt that may have left is sent again with the same key instead of asking a person."""
    verdict = http.verdict(request)
    policy = http.agent.get("accessPolicy") or {}
    if verdict.rule_index is None:
        return False
    rules = policy.get("rules") or []
    return (
        bool(rules[verdict.rule_index].get("resendAfterCrash")) if verdict.rule_index < len(rules) else False
    )


def unknown_call(http: HttpTool, key: str, request: Request) -> dict[str, Any]:
    """What the outcome-unknown gate shows: which agent sent what (the URL as written)."""
    return {
        "key": key,
        "agent": http.agent["key"],
        "tool": HTTP_TOOL.name,
        "method": request.method,
        "url": request.url,
        "question": "This request may have reached its target before the run's worker stopped. "
        "Continue with decision `done` (with a note the agent is told), `resend` (the same "
        "Idempotency-Key) or `fail`.",
    }
