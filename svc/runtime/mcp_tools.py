"""MCP tools for managed agents, under the access policy (docs/mcp.md).

`McpService` lives once per process (an install's actor, or the API for test chats) and holds
the catalogue, the pool of open connections (svc/mcp/client.py), the consent records and the
approvals. `McpService.run(...)` gives an `McpRun` per run (an async context manager): it lists
each server once per run, in parallel, and ends with the run. `McpToolbox(run, agent, sink,
events)` is the agent's toolbox in that run, the narrow interface the agent loop uses:

    specs()              the agent's MCP tools as `mcp__<server>__<tool>` tool specs
    owns(name)           whether a tool call is the toolbox's
    call(name, args)     -> ToolOutcome(output, record, event, approval)

A call goes: the tool must have been offered (consented to, definition unchanged); the MCP rules
decide (allow, deny, the judge, a person's approval; report mode logs and lets it go); then the
server is called through the SDK (a remote server through the egress guard and the agent's HTTP
rules); the security-log entry goes to `sink` and the event to `events`; /metrics counts it.
A call under `require_approval` without a usable approval is not made: the outcome carries
`approval` (an `ApprovalNeeded` with the request's id, the call's digest and a description),
which the run's pause-and-resume machinery turns into a gate (today the model is told).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from plugins import tracing
from plugins.types import ToolSpec
from svc.core import counter_increment, write_metrics
from svc.mcp import CallIdentity, McpFailure, Target, ToolInfo, Unavailable, classify, tool_name
from svc.runtime.mcp_policy import CompiledMcpPolicy, McpAction, compile_mcp_policy, evaluate, listable
from svc.runtime.mcp_run import Events, McpRun, Sink
from svc.runtime.mcp_support import (
    MAX_DESCRIPTION_CHARS,
    ApprovalNeeded,
    ToolOutcome,
    arguments_text,
    event_of,
    judge_call,
    masked,
    render,
)
from svc.runtime.security_log import Decision, DecisionSource, McpCallRecord

DECISIONS: dict[McpAction, Decision] = {
    "allow": "ALLOW",
    "deny": "BLOCK",
    "judge": "JUDGE",
    "passthrough": "PASSTHROUGH",
    "approval": "BLOCK",
}
APPROVAL_TEXT = (
    "This call needs a person's approval, so it was not made. Approval request {id} waits in the "
    "install's console; once it is approved, the same call (same tool, same arguments) goes through once."
)
REFUSED_BY_OPERATOR = "Refused by the operator"
NO_APPROVALS_HERE = "This call needs a person's approval, which a test chat cannot give, so it was not made"


class McpToolbox:
    """One agent's MCP tools in one run."""

    def __init__(self, run: McpRun, agent: dict[str, Any], sink: Sink, events: Events | None) -> None:
        self.run = run
        self.agent = agent
        self.sink = sink
        self.events = events
        self.policy: CompiledMcpPolicy | None = compile_mcp_policy(agent.get("accessPolicy"))
        self._offered: dict[str, tuple[str, ToolInfo, str, Target, Any]] = {}
        self._specs: list[ToolSpec] | None = None

    def owns(self, name: str) -> bool:
        return name in self._offered or name.startswith("mcp__")

    async def specs(self) -> list[ToolSpec]:
        """The tools offered to the model: consented to, definition unchanged, not denied outright."""
        if self._specs is None:
            names = [n for n in self.agent.get("mcpServers") or [] if n in self.run.servers]
            found = await asyncio.gather(*(self._server_tools(name) for name in names))
            self._specs = [spec for specs in found for spec in specs]
        return self._specs

    async def _server_tools(self, name: str) -> list[ToolSpec]:
        server = self.run.servers[name]
        started = time.perf_counter()
        try:
            key, target, check = self.run.reach(server, self.agent)
            tools = await self.run.listing(key, target, check)
        except Unavailable as exc:
            await self._notice(name, "*", "unavailable", str(exc), started)
            return []
        except McpFailure as failure:
            await self._notice(name, "tools/list", "failed", failure.message, started)
            return []
        pins = await self.run.pins() if self.run.consent_required else {}
        specs = []
        for tool in tools:
            if self.run.consent_required:
                status = classify(pins.get((name, tool.name)), tool.digest)
                if status in ("new", "changed"):
                    why = (
                        "it was never consented to"
                        if status == "new"
                        else "its definition changed since consent"
                    )
                    await self._notice(name, tool.name, "quarantined", f"Quarantined: {why}", started)
                    continue
                if status == "refused":
                    continue
            if not listable(self.policy, name, tool.name):
                continue
            model_name = tool_name(name, tool.name)
            self._offered[model_name] = (name, tool, key, target, check)
            schema = tool.input_schema if tool.input_schema.get("type") == "object" else {"type": "object"}
            description = tool.description[:MAX_DESCRIPTION_CHARS] or f"{tool.name} (MCP server {name})"
            specs.append(ToolSpec(model_name, description, schema))
        return specs

    async def call(self, name: str, arguments: Any) -> ToolOutcome:
        """Decide, make and log one call (see the module docstring)."""
        started = time.perf_counter()
        offered = self._offered.get(name)
        if offered is None:
            return ToolOutcome(f"Unknown tool {name!r}", None, None)
        server, tool, key, target, check = offered
        if not isinstance(arguments, dict):
            return await self._logged(
                name, server, tool.name, {}, "invalid", "BLOCK", None, "arguments must be an object", started
            )
        verdict = evaluate(self.policy, server, tool.name, arguments)
        reporting = self.policy is not None and self.policy.report_only
        source: DecisionSource | None = verdict.source  # then "judge" or "approval", as in http_tool.py
        reason = verdict.reason
        judge: tuple[str | None, float | None] = (None, None)
        approval: ApprovalNeeded | None = None
        blocked: str | None = None
        label = {
            "allow": "allowed",
            "passthrough": "allowed",
            "deny": "denied",
            "judge": "judged",
            "approval": "approved",
        }[verdict.action]
        if verdict.action == "deny":
            blocked = f"Blocked by the access policy: {verdict.reason or 'not allowed'}"
        elif verdict.action == "judge":
            allowed, reasoning, confidence = await judge_call(
                self.run.service.llm,
                self.run.service.judge_model,
                self.agent,
                server,
                tool.name,
                arguments_text(masked(arguments, self.run.secrets)),
                verdict.reason,
            )
            judge, source = (reasoning, confidence), "judge"
            if not allowed:
                blocked, reason = (
                    f"Blocked by the security judge: {reasoning}",
                    "Blocked by the security judge",
                )
        elif verdict.action == "approval" and not reporting and not self.run.approvals_enabled:
            blocked, label, reason = NO_APPROVALS_HERE, "approval_required", NO_APPROVALS_HERE
        elif verdict.action == "approval" and not reporting:
            identity = CallIdentity(
                self.run.install_id,
                self.run.run_id,
                self.agent["key"],
                server,
                tool.name,
                arguments,
                self.policy.version if self.policy else "",
            )
            used = await self.run.service.approvals.consume(identity)
            source = "approval"
            if used == "rejected":
                blocked, label, reason = REFUSED_BY_OPERATOR, "rejected", REFUSED_BY_OPERATOR
            elif used is None:
                shown = masked(arguments, self.run.secrets)
                who = self.agent["key"]
                text = f"{who} wants to call {tool.name} on MCP server {server} with {arguments_text(shown)}"
                request = await self.run.service.approvals.request(identity, shown, text)
                approval = ApprovalNeeded(request["_id"], identity.digest, text)
                blocked, label, reason = (
                    APPROVAL_TEXT.format(id=request["_id"]),
                    "approval_required",
                    "Awaiting approval",
                )
        if blocked is not None and not reporting:
            return await self._logged(
                name,
                server,
                tool.name,
                arguments,
                label,
                DECISIONS[verdict.action] if label != "judged" else "JUDGE",
                source,
                reason,
                started,
                judge=judge,
                output=blocked,
                approval=approval,
            )
        report_only = reporting and (blocked is not None or verdict.action == "approval")
        if report_only:
            label = "reported"
        try:
            connection = await self.run.service.pool.get(key, target, check)
            result = await connection.call(tool.name, arguments)
        except McpFailure as failure:
            if failure.kind in ("crashed", "protocol", "timeout"):
                await self.run.service.pool.drop(key)
            decision: Decision = "BLOCK" if failure.kind == "refused" else DECISIONS[verdict.action]
            if label == "approved" and failure.kind != "refused":
                decision = "ALLOW"  # the person's approval let it go; the server then failed
            return await self._logged(
                name,
                server,
                tool.name,
                arguments,
                label,
                decision,
                source,
                failure.message,
                started,
                judge=judge,
                output=f"The MCP call failed: {failure.message}",
                outcome="failed",
                report_only=report_only,
            )
        text, is_error = render(result)
        decision = "JUDGE" if verdict.action == "judge" else DECISIONS[verdict.action]
        if verdict.action == "approval" and not reporting:
            decision = "ALLOW"
        return await self._logged(
            name,
            server,
            tool.name,
            arguments,
            label,
            decision,
            source,
            reason,
            started,
            judge=judge,
            output=text,
            outcome="tool_error" if is_error else "ok",
            status=500 if is_error else 200,
            report_only=report_only,
        )

    async def _notice(self, server: str, tool: str, verdict: str, message: str, started: float) -> None:
        """A server or tool the agent could not be offered: logged once per run."""
        mark = (server, tool, verdict)
        if mark in self.run.noted:
            return
        self.run.noted.add(mark)
        await self._logged(
            tool_name(server, tool),
            server,
            tool,
            None,
            verdict,
            "BLOCK",
            None,
            message,
            started,
            outcome=verdict,
            listing=True,
        )

    async def _logged(
        self,
        model_name: str,
        server: str,
        tool: str,
        arguments: Any,
        verdict: str,
        decision: Decision,
        source: DecisionSource | None,
        reason: str | None,
        started: float,
        *,
        judge: tuple[str | None, float | None] = (None, None),
        output: str | None = None,
        outcome: str | None = None,
        status: int | None = None,
        approval: ApprovalNeeded | None = None,
        report_only: bool = False,
        listing: bool = False,
    ) -> ToolOutcome:
        latency = int((time.perf_counter() - started) * 1000)
        details: dict[str, Any] = {
            "server": server,
            "tool": tool,
            "arguments": None if arguments is None else masked(arguments, self.run.secrets),
            "verdict": verdict,
            "outcome": outcome or ("not_made" if status is None else "ok"),
            "durationMs": latency,
            "approvalId": approval.approval_id if approval else None,
            "digest": approval.digest if approval else None,
        }
        record = McpCallRecord(
            installId=self.run.install_id,
            agentKey=self.agent["key"],
            agentName=self.agent.get("name") or self.agent["key"],
            runId=self.run.run_id,
            method="MCP",
            url=f"mcp://{server}/{tool}",
            hostname=server,
            path=f"/{tool}",
            decision=decision,
            decisionSource=source,
            reason=reason,
            judgeReasoning=judge[0],
            judgeConfidence=judge[1],
            statusCode=status,
            latencyMs=latency,
            reportOnly=report_only,
            mcp=details,
        )
        if not listing:  # a call's verdict on its `execute_tool` span, like http_request's (tracing, #33)
            tracing.policy_decision(
                traced_outcome(verdict, details["outcome"] != "not_made"),
                decision=decision,
                source=source,
                reason=reason,
                judge_reasoning=judge[0],
                judge_confidence=judge[1],
                method="MCP",
                url=record.url,
            )
        await self.sink(record)
        event = event_of(record, model_name)
        if self.events is not None:
            self.events("tool_call", event)
        self.run.count(
            write_metrics(
                self.run.service.store,
                [counter_increment("mcp_tool_calls", {"verdict": verdict, "outcome": details["outcome"]})],
            )
        )
        return ToolOutcome(output or reason or verdict, record, event, approval)


def traced_outcome(verdict: str, made: bool) -> str:
    """The trace's `svc.policy.outcome` (plugins.tracing.OUTCOMES) of an MCP call's verdict."""
    return {
        "allowed": "allowed",
        "reported": "reported",
        "approved": "approval_granted",
        "approval_required": "approval_requested",
        "rejected": "approval_refused",
        "judged": "allowed" if made else "denied",
    }.get(verdict, "denied")
