"""The outbound-request security log: one entry per agent HTTP request, as the spec's resource.

URLs are stored as the agent wrote them (with `${SECRET}` references), never with
secrets substituted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from svc.core import Store, Timeline, counters, iso, tokens, utcnow, windows
from svc.runs import run_stats

LOG_LIMIT = 200
KEPT_FOR = timedelta(days=30)  # the TTL index on createdAt (svc/core/store.py)
# The reasons the agent loop writes for a judge's refusal and an egress-guard refusal.
JUDGE_BLOCKED = "Blocked by the security judge"
GUARD_PREFIX = "Egress guard:"
Decision = Literal["ALLOW", "BLOCK", "JUDGE", "PASSTHROUGH"]


@dataclass(frozen=True)
class RequestRecord:
    """One logged request."""

    installId: str
    agentKey: str
    agentName: str
    runId: str
    method: str
    url: str
    hostname: str
    path: str
    decision: Decision
    decisionSource: Literal["rule", "default", "judge"] | None
    reason: str | None
    judgeReasoning: str | None
    judgeConfidence: float | None
    statusCode: int | None
    latencyMs: int
    # The decision was only reported (the agent's policy is in report mode): nothing was blocked.
    reportOnly: bool = False


async def count_decision(store: Store, entry: RequestRecord) -> None:
    """Judge decisions and blocked requests, for GET /metrics (docs/operations.md).

    A policy in report mode blocks nothing: its judge verdicts count, its would-be blocks do not.
    """
    judge_blocked = entry.reason == JUDGE_BLOCKED
    if entry.decisionSource == "judge":
        verdict = "block" if judge_blocked else "allow"
        await counters.inc(store, "judge_decisions", {"decision": verdict})
    if entry.reportOnly:
        return
    if judge_blocked:
        await counters.inc(store, "egress_blocks", {"by": "judge"})
    elif (entry.reason or "").startswith(GUARD_PREFIX):
        await counters.inc(store, "egress_blocks", {"by": "guard"})
    elif entry.decision == "BLOCK":
        await counters.inc(store, "egress_blocks", {"by": "policy"})


class SecurityLog:
    """Writes and reads the log."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def record(self, entry: RequestRecord) -> None:
        """Store one entry, and count it as a tool call of the install (the log expires; counts stay)."""
        await self.store["security_requests"].insert_one(
            {"_id": tokens.new_id(), **asdict(entry), "createdAt": utcnow()}
        )
        await run_stats.count_tool_call(self.store, entry.installId, entry.statusCode)
        await count_decision(self.store, entry)
        if entry.decision in ("BLOCK", "JUDGE"):
            # A verdict that blocked (or would have, in report mode) or went to the judge.
            action = "egress.judged" if entry.decision == "JUDGE" else "egress.blocked"
            meta = {
                "runId": entry.runId,
                "agentKey": entry.agentKey,
                "method": entry.method,
                "hostname": entry.hostname,
                "path": entry.path,
                "decisionSource": entry.decisionSource,
                "reason": entry.reason,
                "reportOnly": entry.reportOnly,
            }
            await Timeline(self.store).record("egress", action, install_id=entry.installId, meta=meta)

    async def latest(self, install_id: str, since: datetime | None = None) -> list[dict[str, Any]]:
        """The last 200 entries of an install, newest first.

        Read in windows (svc/core/windows.py) back to the later of `since` (the install's
        creation) and the log's 30-day retention, so the cost depends on the 200, not on
        how many requests the install made.
        """
        floor = utcnow() - KEPT_FOR - timedelta(days=1)  # the TTL monitor runs late, never early
        docs = await windows.newest(
            self.store["security_requests"],
            {"installId": install_id},
            LOG_LIMIT,
            floor=max(floor, since) if since is not None else floor,
        )
        return [
            {
                "id": doc.pop("_id"),
                **{k: v for k, v in doc.items() if k != "installId"},
                "createdAt": iso(doc["createdAt"]),
            }
            for doc in docs
        ]
