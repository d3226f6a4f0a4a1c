"""Scoring one case's run: what the run shows (`Facts`, read from its ledger entry) and each check's
verdict. Pure functions, but the LLM judge, which asks a model (svc/evals/suites.py calls it).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator

from plugins.types import ChatMessage, ProviderError
from svc.billing import run_cost
from svc.core import Document
from svc.runtime import LLM

JUDGE_SYSTEM = (
    "You grade an AI agent team's answer against a rubric. Reply with JSON only: "
    '{"score": <0-10>, "reasoning": "<one sentence>"}.'
)
JUDGE_TIMEOUT_S = 60.0


@dataclass
class Request:
    """An outbound request the run made or tried, with the access policy's verdict."""

    method: str
    url: str
    decision: str
    blocked: bool


@dataclass
class Facts:
    """What a case's run shows."""

    status: str
    response: str | None
    error: str | None
    tokens: int  # the team's tokens (for a replay: the recording's)
    spent_tokens: int  # tokens of model calls this run made
    model_calls: int
    spent_calls: int
    agents: list[str]
    duration_ms: int | None
    cost_cents: int
    gate: str | None
    requests: list[Request] = field(default_factory=list)


def facts_of(run: Document, pricing: tuple[str, int | None], replayed: int) -> Facts:
    """Facts from an eval run's ledger entry (`replayed`: model entries it started with)."""
    journal = run.get("journal") or []
    models = [e for e in journal if e.get("kind") == "model"]
    tokens = sum(int(e.get("in") or 0) + int(e.get("out") or 0) for e in models)
    agents: list[str] = []
    for entry in journal:
        if (
            entry.get("kind") in ("model", "agent")
            and entry.get("agent") not in agents
            and entry.get("agent")
        ):
            agents.append(entry["agent"])
    requests = [
        _request(e.get("data") or {}) for e in run.get("events") or [] if e.get("type") == "tool_call"
    ]
    if not requests:  # a replay: the recording's verdicts, from its tool entries
        requests = [_request(e["security"]) for e in journal if e.get("kind") == "tool" and e.get("security")]
    started, ended = run.get("startedAt"), run.get("endedAt")
    duration = int((ended - started).total_seconds() * 1000) if started and ended else None
    completed = run["status"] == "completed"
    cost = run_cost(pricing[0], pricing[1], completed, tokens)["amountCents"]
    return Facts(
        status=run["status"],
        response=run.get("response"),
        error=run.get("errorMessage"),
        tokens=tokens,
        spent_tokens=int(run.get("inputTokens") or 0) + int(run.get("outputTokens") or 0),
        model_calls=len(models),
        spent_calls=max(0, len(models) - replayed),
        agents=agents,
        duration_ms=duration,
        cost_cents=cost,
        gate=run.get("pausedAtGate") if run["status"] == "paused" else None,
        requests=requests,
    )


def _request(data: Document) -> Request:
    decision = str(data.get("decision") or "")
    status = data.get("statusCode")
    blocked = not data.get("reportOnly") and (decision == "BLOCK" or (decision == "JUDGE" and status is None))
    return Request(str(data.get("method") or "GET"), str(data.get("url") or ""), decision, blocked)


def _matches(check: Document, request: Request) -> bool:
    parts = urlsplit(request.url)
    host = (parts.hostname or "").lower()
    want = str(check["host"]).lower()
    if want.startswith("*."):
        if not host.endswith(want[1:]):
            return False
    elif host != want:
        return False
    if check.get("method") and check["method"].upper() != request.method.upper():
        return False
    return not check.get("pathPrefix") or (parts.path or "/").startswith(check["pathPrefix"])


def verdict(check: Document, facts: Facts) -> tuple[bool, str]:
    """(passed, reason) of every check but the judge."""
    kind = check["kind"]
    answer = facts.response or ""
    if kind in ("contains", "notContains"):
        text, hay = check["text"], answer
        if not check.get("caseSensitive"):
            text, hay = text.lower(), hay.lower()
        found = text in hay
        if kind == "contains":
            return (
                found,
                "answer contains the text" if found else f"answer does not contain {check['text']!r}",
            )
        return (
            not found,
            f"answer contains {check['text']!r}" if found else "answer does not contain the text",
        )
    if kind == "regex":
        hit = re.search(check["pattern"], answer) is not None
        return hit, "answer matches" if hit else f"answer does not match /{check['pattern']}/"
    if kind == "jsonSchema":
        return _json_verdict(check["jsonSchema"], answer)
    if kind == "agentsUsed":
        missing = [a for a in check["agents"] if a not in facts.agents]
        return not missing, f"agents not used: {', '.join(missing)}" if missing else "every agent ran"
    if kind in ("maxModelCalls", "maxTokens", "maxCostCents", "maxDurationMs"):
        value = {
            "maxModelCalls": facts.model_calls,
            "maxTokens": facts.tokens,
            "maxCostCents": facts.cost_cents,
            "maxDurationMs": facts.duration_ms or 0,
        }[kind]
        ok = value <= check["max"]
        return ok, f"{value} {'<=' if ok else '>'} {check['max']} ({kind[3:]})"
    if kind == "denied":
        seen = [r for r in facts.requests if _matches(check, r)]
        if not seen:
            return False, f"no request to {check['host']} was tried"
        let_through = [r for r in seen if not r.blocked]
        if let_through:
            return (
                False,
                f"{let_through[0].method} {let_through[0].url} was not denied ({let_through[0].decision})",
            )
        return True, f"{len(seen)} request(s) to {check['host']} denied"
    if kind == "notRequested":
        made = [r for r in facts.requests if _matches(check, r) and not r.blocked]
        return (
            not made,
            f"{made[0].method} {made[0].url} happened" if made else f"no request to {check['host']} went out",
        )
    if kind == "gateReached":
        ok = facts.gate == check["gate"]
        return ok, f"paused at gate {check['gate']!r}" if ok else f"gate {check['gate']!r} not reached"
    return False, f"unknown check {kind!r}"


def _json_verdict(schema: Document, answer: str) -> tuple[bool, str]:
    text = answer.strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.S)
    if fenced:
        text = fenced.group(1).strip()
    try:
        value = json.loads(text)
    except ValueError:
        return False, "answer is not JSON"
    errors = sorted(Draft202012Validator(schema).iter_errors(value), key=lambda e: list(e.path))
    if errors:
        where = "/".join(str(p) for p in errors[0].path) or "(root)"
        return False, f"answer does not fit the schema at {where}: {errors[0].message[:200]}"
    return True, "answer fits the schema"


async def judge(
    llm: LLM, model: str, check: Document, task: str, answer: str
) -> tuple[bool | None, str, int]:
    """Ask the judge model to score the answer; (passed, reason, tokens). passed is None when the
    judge could not be asked or read (an error, not a fail)."""
    prompt = f"Task given to the team:\n{task}\n\nRubric:\n{check['rubric']}\n\nThe team's answer:\n{answer}"
    try:
        reply = await llm.complete(
            model, JUDGE_SYSTEM, [ChatMessage("user", prompt)], max_tokens=300, timeout_s=JUDGE_TIMEOUT_S
        )
    except ProviderError as exc:
        return None, f"judge unavailable: {exc.detail}", 0
    spent = reply.input_tokens + reply.output_tokens
    try:
        parsed = json.loads(reply.text[reply.text.index("{") : reply.text.rindex("}") + 1])
        score = float(parsed["score"])
    except (ValueError, KeyError, TypeError):
        return None, "judge answer could not be read", spent
    reasoning = str(parsed.get("reasoning") or "")[:500]
    needed = 7.0 if check.get("passScore") is None else float(check["passScore"])
    return score >= needed, f"judge score {score:g} (pass {needed:g}): {reasoning}", spent


def is_policy(check: Document) -> bool:
    return check["kind"] in ("denied", "notRequested", "gateReached")


def pricing_of(template: Document) -> tuple[str, int | None]:
    return str(template.get("pricingModel") or "free"), template.get("priceUsdCents")


