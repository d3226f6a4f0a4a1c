"""What an MCP tool call leaves behind: the model's text, the security-log entry, the run's event,
the judge's question; arguments with secrets masked and large values cut.

The security-log entry is the spec's resource with the MCP call in it (`McpCallRecord`,
svc/runtime/security_log.py): `method` is `MCP`, `url` is `mcp://<server>/<tool>`, `hostname` the
server and `path` `/<tool>`, so every reader of the log (the console, the run detail, the
timeline) shows it beside HTTP requests; `kind: "mcp"` and `mcp` (server, tool, arguments,
verdict, outcome, error, duration, approval) carry the rest. `decision` keeps the spec's four
values; the MCP verdict says more: allowed, denied, judged, approved, rejected,
approval_required, reported, quarantined, unavailable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from plugins.types import ChatMessage, ProviderError
from svc.runtime.llm import LLM
from svc.runtime.security_log import McpCallRecord

MAX_OUTPUT_CHARS = 8_000
MAX_VALUE_CHARS = 500
MAX_ARGUMENTS_CHARS = 4_000
MAX_DESCRIPTION_CHARS = 2_000
JUDGE_TIMEOUT_S = 20.0
MASK = "***"
JUDGE_SYSTEM = (
    "You are a security judge for tool calls an AI agent makes through MCP servers. Decide whether "
    "the call fits the agent's declared role and task. Answer with JSON only, no prose: "
    '{"decision": "allow" or "block", "reasoning": "<one sentence>", "confidence": <0 to 1>}.'
)


@dataclass(frozen=True)
class ApprovalNeeded:
    """The call waits for a person: the request's id, the call's digest and what to show them."""

    approval_id: str
    digest: str
    description: str


@dataclass(frozen=True)
class ToolOutcome:
    """What the model is told, the security-log entry and the run's event (both already written
    through the toolbox's sink), and, for a call that needs a person, the approval it waits for."""

    output: str
    record: McpCallRecord | None
    event: dict[str, Any] | None
    approval: ApprovalNeeded | None = None


def masked(value: Any, secrets: dict[str, str]) -> Any:
    """The value with every secret's text replaced by *** and long strings cut."""
    if isinstance(value, str):
        for secret in secrets.values():
            if len(secret) >= 4 and secret in value:
                value = value.replace(secret, MASK)
        if len(value) > MAX_VALUE_CHARS:
            value = f"{value[:MAX_VALUE_CHARS]}... ({len(value)} characters)"
        return value
    if isinstance(value, dict):
        return {str(k): masked(v, secrets) for k, v in list(value.items())[:100]}
    if isinstance(value, list):
        return [masked(v, secrets) for v in value[:100]]
    return value


def arguments_text(arguments: Any) -> str:
    """Masked arguments as compact JSON, at most MAX_ARGUMENTS_CHARS."""
    text = json.dumps(arguments, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= MAX_ARGUMENTS_CHARS else text[:MAX_ARGUMENTS_CHARS] + "..."


def cut(text: str, limit: int) -> str:
    """At most `limit` characters, saying how many were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[truncated: {len(text) - limit} more characters not shown]"


def render(result: Any) -> tuple[str, bool]:
    """A `CallToolResult` as text for the model (images and audio as a short note), and whether
    the tool reported an error."""
    parts: list[str] = []
    for item in result.content or []:
        kind = getattr(item, "type", "")
        if kind == "text":
            parts.append(item.text)
        elif kind in ("image", "audio"):
            size = len(item.data or "") * 3 // 4
            parts.append(f"[{kind} {item.mime_type}, about {size} bytes, not shown]")
        elif kind == "resource":
            text = getattr(item.resource, "text", None)
            parts.append(text if isinstance(text, str) else f"[resource {item.resource.uri}, not shown]")
        elif kind == "resource_link":
            parts.append(f"[resource link {item.uri}]")
    if result.structured_content is not None and not parts:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    text = "\n".join(parts) or "(the tool answered with no content)"
    if result.is_error:
        text = f"The tool reported an error: {text}"
    return cut(text, MAX_OUTPUT_CHARS), bool(result.is_error)


def event_of(record: McpCallRecord, model_name: str) -> dict[str, Any]:
    """The run's `tool_call` event for an MCP call (never a secret: the arguments are masked)."""
    details = record.mcp
    return {
        "agent": record.agentKey,
        "tool": model_name,
        "kind": "mcp",
        "method": record.method,
        "url": record.url,
        "server": details.get("server"),
        "mcpTool": details.get("tool"),
        "arguments": details.get("arguments"),
        "verdict": details.get("verdict"),
        "outcome": details.get("outcome"),
        "approvalId": details.get("approvalId"),
        "decision": record.decision,
        "decisionSource": record.decisionSource,
        "reason": record.reason,
        "reportOnly": record.reportOnly,
        "statusCode": record.statusCode,
        "latencyMs": record.latencyMs,
    }


async def judge_call(
    llm: LLM, model: str, agent: dict[str, Any], server: str, tool: str, arguments: str, rule: str | None
) -> tuple[bool, str, float | None]:
    """Ask the judge about one tool call, as it is asked about an HTTP request; any failure
    blocks (fail closed)."""
    context = (
        f"Agent: {agent['name']} (role: {agent.get('role') or 'unspecified'}; "
        f"title: {agent.get('title') or 'unspecified'}; "
        f"capabilities: {agent.get('capabilities') or 'n/a'})\n"
        f"Tool call: server {server}, tool {tool}, arguments {arguments}\n"
        f"Rule: {rule or 'requires the judge'}"
    )
    try:
        answer = await llm.complete(
            model, JUDGE_SYSTEM, [ChatMessage("user", context)], max_tokens=300, timeout_s=JUDGE_TIMEOUT_S
        )
        verdict = json.loads(answer.text[answer.text.index("{") : answer.text.rindex("}") + 1])
        decision = str(verdict["decision"]).lower()
        confidence = float(verdict["confidence"]) if verdict.get("confidence") is not None else None
        reasoning = str(verdict.get("reasoning") or "")
    except ProviderError as exc:
        return False, f"Judge unavailable: {exc.detail}", None
    except (ValueError, KeyError, TypeError):
        return False, "Judge answer could not be read; blocked", None
    return decision == "allow", reasoning, confidence
