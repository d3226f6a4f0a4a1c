"""The `http_request` tool: secrets, the access policy (and its judge), the egress guard.

In order: `${NAME}` is replaced by the install's secret in the URL and header values (not the
body); the agent's access policy decides (the LLM judge for `require_approval`, failing closed;
report mode logs the decision and lets the request go); the egress guard vets the destination and
pins the connection to the vetted address. What the model gets back is `{status, body (at most
MAX_BODY_CHARS), truncated}`; at most MAX_BODY_BYTES of a response are read at all.

A request that changes something (POST, PATCH) carries an `Idempotency-Key` derived from its
journal key (the same on every attempt), so a server that honours the header deduplicates a
resend after a crash (svc/runtime/journal.py). The outcome's `record` is the security-log entry;
the journal keeps it and the run's settlement writes it (svc/runtime/settlement.py).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from plugins import tracing
from plugins.egress import EgressDenied, egress_client
from plugins.types import ChatMessage, ProviderError, ToolSpec
from svc.runtime.llm import LLM
from svc.runtime.policy import Action, CompiledPolicy, Verdict, compile_policy, evaluate
from svc.runtime.security_log import Decision, DecisionSource, RequestRecord

MAX_BODY_CHARS = 8_000
MAX_BODY_BYTES = 1_000_000
HTTP_TIMEOUT_S = 30.0
JUDGE_TIMEOUT_S = 20.0
SECRET_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
DECISIONS: dict[Action, Decision] = {
    "allow": "ALLOW",
    "deny": "BLOCK",
    "judge": "JUDGE",
    "passthrough": "PASSTHROUGH",
}
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
# Sending one of these twice has the effect of sending it once (RFC 9110), so one that was in
# flight when its actor died is simply sent again; the others wait for a person, or carry a key.
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
IDEMPOTENCY_HEADER = "Idempotency-Key"

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


@dataclass(frozen=True)
class Request:
    """An `http_request` call, checked: method, the URL as written, headers and body."""

    method: str
    url: str
    headers: dict[str, str]
    body: str | None

    @classmethod
    def parse(cls, arguments: dict[str, Any]) -> Request | None:
        """None when the arguments are not a request (the model is told so)."""
        method = str(arguments.get("method", "GET")).upper()
        headers = arguments.get("headers") or {}
        body = arguments.get("body")
        if (
            method not in METHODS
            or not isinstance(headers, dict)
            or not (body is None or isinstance(body, str))
        ):
            return None
        return cls(method, str(arguments.get("url", "")), {str(k): str(v) for k, v in headers.items()}, body)

    @property
    def idempotent(self) -> bool:
        return self.method in IDEMPOTENT


@dataclass(frozen=True)
class Outcome:
    """What the model is told, and the security-log entry (None when nothing was sent or judged)."""

    output: str
    record: RequestRecord | None


INVALID = Outcome(
    "Invalid http_request: method must be an HTTP method, headers an object, body a string", None
)


def substitute(text: str, secrets: dict[str, str]) -> str:
    """`${NAME}` replaced by the secret's value (unknown names stay as written)."""
    return SECRET_REFERENCE.sub(lambda m: secrets.get(m.group(1), m.group(0)), text)


def compiled_policy(policy: dict[str, Any] | None) -> CompiledPolicy | None:
    """The agent's policy, compiled once per process (compiling costs milliseconds; runs repeat it)."""
    return None if policy is None else _compile(json.dumps(policy, sort_keys=True))


@functools.lru_cache(maxsize=512)
def _compile(policy_json: str) -> CompiledPolicy | None:
    return compile_policy(json.loads(policy_json))


def idempotency_key(run_id: str, journal_key: str) -> str:
    """The same key on every attempt of one call, and nothing a server could read back."""
    return hashlib.sha256(f"{run_id}|{journal_key}".encode()).hexdigest()[:40]


@dataclass
class HttpTool:
    """`http_request` for one agent of one run."""

    llm: LLM
    install_id: str
    run_id: str
    agent: dict[str, Any]
    secrets: dict[str, str]
    allow_private: bool
    judge_model: str

    @property
    def policy(self) -> CompiledPolicy | None:
        return compiled_policy(self.agent.get("accessPolicy"))

    def verdict(self, request: Request) -> Verdict:
        """The access policy's verdict on the real destination (secrets filled in)."""
        return evaluate(self.policy, request.method, substitute(request.url, self.secrets))

    async def call(
        self,
        request: Request,
        journal_key: str,
        before_send: Callable[[], Awaitable[None]] | None = None,
        replayed: str | None = None,
    ) -> Outcome:
        """Judge, guard and send one request; `before_send` runs right before it leaves (the
        journal's `sending` mark for a request that is not idempotent). `replayed`: the answer a
        replayed eval case's recording gave; the policy decides as always, and an allowed request
        gets that answer instead of being sent (docs/evals.md)."""
        started = time.perf_counter()
        parts = urlsplit(request.url)
        verdict = self.verdict(request)
        decision = DECISIONS[verdict.action]
        judge: tuple[str | None, float | None] = (None, None)
        source: DecisionSource | None = verdict.source
        reason = verdict.reason

        def record(
            decision: Decision,
            source: DecisionSource | None,
            reason: str | None,
            status: int | None,
            report: bool = False,
        ) -> RequestRecord:
            return RequestRecord(
                installId=self.install_id,
                agentKey=self.agent["key"],
                agentName=self.agent["name"],
                runId=self.run_id,
                method=request.method,
                url=request.url,
                hostname=parts.hostname or "",
                path=parts.path or "/",
                decision=decision,
                decisionSource=source,
                reason=reason,
                judgeReasoning=judge[0],
                judgeConfidence=judge[1],
                statusCode=status,
                latencyMs=int((time.perf_counter() - started) * 1000),
                reportOnly=report,
            )

        # Report mode: the decision is computed and logged as it would be enforced (reportOnly),
        # and the request goes ahead; one log entry carries both the decision and the outcome.
        policy = self.policy
        reporting = policy is not None and policy.report_only
        would_block = verdict.action == "deny"
        if verdict.action == "judge":
            allowed, reasoning, confidence = await self.judge(request, verdict.reason)
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
            method=request.method,
            url=request.url,
        )
        if would_block and not reporting:
            entry = record(decision, source, reason, None)
            if verdict.action == "deny":
                return Outcome(f"Blocked by the access policy: {verdict.reason or 'not allowed'}", entry)
            return Outcome(f"Blocked by the security judge: {judge[0]}", entry)
        report_only = reporting and would_block
        if replayed is not None:
            return Outcome(replayed, record(decision, source, reason, replayed_status(replayed), report_only))
        headers = {name: substitute(value, self.secrets) for name, value in request.headers.items()}
        if not request.idempotent and not any(k.lower() == "idempotency-key" for k in headers):
            headers[IDEMPOTENCY_HEADER] = idempotency_key(self.run_id, journal_key)
        if before_send is not None:
            await before_send()
        try:
            status, text, truncated = await self._send(request, headers)
        except EgressDenied as exc:
            # The reason never names the host: the host may carry a substituted secret.
            return Outcome(
                f"Blocked: {exc.reason}", record("BLOCK", source, f"Egress guard: {exc.reason}", None)
            )
        except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
            failure = f"Request failed: {type(exc).__name__}"
            return Outcome(failure, record(decision, source, failure, None, report_only))
        answer = json.dumps({"status": status, "body": text, "truncated": truncated})
        return Outcome(answer, record(decision, source, reason, status, report_only))

    async def _send(self, request: Request, headers: dict[str, str]) -> tuple[int, str, bool]:
        """The status and at most MAX_BODY_CHARS of the body (reading at most MAX_BODY_BYTES)."""
        url = substitute(request.url, self.secrets)
        content = request.body.encode() if isinstance(request.body, str) else None
        async with (
            egress_client(self.allow_private, timeout=HTTP_TIMEOUT_S) as client,
            client.stream(request.method, url, headers=headers, content=content) as response,
        ):
            received = bytearray()
            async for chunk in response.aiter_bytes():
                received += chunk
                if len(received) >= MAX_BODY_BYTES:
                    break
            text = bytes(received[:MAX_BODY_BYTES]).decode(response.encoding or "utf-8", errors="replace")
            truncated = len(text) > MAX_BODY_CHARS or len(received) >= MAX_BODY_BYTES
            return response.status_code, text[:MAX_BODY_CHARS], truncated

    async def judge(self, request: Request, reason: str | None) -> tuple[bool, str, float | None]:
        """Ask the judge model; any failure blocks (fail closed)."""
        agent = self.agent
        context = (
            f"Agent: {agent['name']} (role: {agent.get('role') or 'unspecified'}; "
            f"title: {agent.get('title') or 'unspecified'}; "
            f"capabilities: {agent.get('capabilities') or 'n/a'})\n"
            f"Request: {request.method} {request.url}\nRule: {reason or 'requires approval'}"
        )
        try:
            answer = await self.llm.complete(
                self.judge_model,
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


def replayed_status(answer: str) -> int | None:
    """The upstream status in a recorded `http_request` answer (None for a blocked or failed one)."""
    try:
        status = json.loads(answer).get("status")
    except (ValueError, AttributeError):
        return None
    return status if isinstance(status, int) else None


def tool_event(entry: RequestRecord) -> dict[str, Any]:
    """An `http_request` and the access policy's decision, for the run's watchers (the URL as
    written, never with secrets)."""
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
