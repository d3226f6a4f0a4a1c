"""The outbound-request security log: one entry per agent HTTP request, as the spec's resource.

URLs are stored as the agent wrote them (with `${SECRET}` references), never with
secrets substituted. A run's journal keeps each entry with its tool call; the run's settlement
stores them (svc/runtime/settlement.py), once each.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any, Literal

from svc.core import (
    Batch,
    Document,
    MetricChange,
    Store,
    add_timeline_entry,
    counter_increment,
    iso,
    newest_in_windows,
    timeline_entry,
    utcnow,
)

COLLECTION = "security_requests"
LOG_LIMIT = 200
KEPT_FOR = timedelta(days=30)  # the TTL index on createdAt (svc/core/store.py)
# The reasons the agent loop writes for a judge's refusal and an egress-guard refusal.
JUDGE_BLOCKED = "Blocked by the security judge"
GUARD_PREFIX = "Egress guard:"
Decision = Literal["ALLOW", "BLOCK", "JUDGE", "PASSTHROUGH"]
# What decided: a policy rule, the policy's default, the security judge, a person's approval (MCP).
DecisionSource = Literal["rule", "default", "judge", "approval"]


@dataclass(frozen=True)
class RequestRecord:
    """One logged request, as stored. This is the one definition of a security-log entry's fields:
    what each reader shows (`ENTRY_FIELDS`, `RUN_ENTRY_FIELDS`) and the response models of the API
    (api/schemas/runtime.py) follow from it; `about` is a field's description there."""

    installId: str
    agentKey: str
    agentName: str
    runId: str
    method: str
    url: str = field(metadata={"about": "as the agent wrote it, secrets as ${NAME}"})
    hostname: str
    path: str
    decision: Decision
    decisionSource: DecisionSource | None
    reason: str | None
    judgeReasoning: str | None
    judgeConfidence: float | None = field(metadata={"about": "0 to 1 when judged"})
    statusCode: int | None = field(metadata={"about": "null when blocked"})
    latencyMs: int
    # The decision was only reported (the agent's policy is in report mode): nothing was blocked.
    reportOnly: bool = False


@dataclass(frozen=True)
class McpCallRecord(RequestRecord):
    """The entry of an MCP tool call (or of a server that could not be used): `method` MCP, `url`
    mcp://<server>/<tool>, and the call's details (svc/runtime/mcp_support.py)."""

    kind: Literal["mcp"] = "mcp"
    mcp: dict[str, Any] = field(
        default_factory=dict,
        metadata={"about": "server, tool, arguments (masked), verdict, outcome, durationMs"},
    )


# What a reader is shown of an entry besides its id and time: every field but the install (the
# route names it); a run's detail also leaves out the run. A field with a default may be missing
# from an entry (an HTTP request has no `kind`; an entry stored before the field existed).
ENTRY_FIELDS = tuple(f.name for f in fields(McpCallRecord) if f.name != "installId")
RUN_ENTRY_FIELDS = tuple(name for name in ENTRY_FIELDS if name != "runId")


def decision_changes(entry: Document) -> list[MetricChange | None]:
    """Judge decisions and blocked requests, for GET /metrics (docs/operations.md).

    A policy in report mode blocks nothing: its judge verdicts count, its would-be blocks do not.
    """
    judge_blocked = entry.get("reason") == JUDGE_BLOCKED
    changes: list[MetricChange | None] = []
    if entry.get("decisionSource") == "judge":
        verdict = "block" if judge_blocked else "allow"
        changes.append(counter_increment("judge_decisions", {"decision": verdict}))
    if entry.get("reportOnly"):
        return changes
    if judge_blocked:
        changes.append(counter_increment("egress_blocks", {"by": "judge"}))
    elif (entry.get("reason") or "").startswith(GUARD_PREFIX):
        changes.append(counter_increment("egress_blocks", {"by": "guard"}))
    elif entry.get("decision") == "BLOCK":
        changes.append(counter_increment("egress_blocks", {"by": "policy"}))
    return changes


def add_to(batch: Batch, entry: Document, entry_id: str, timeline_id: str, at: datetime) -> None:
    """One security-log entry as operations of a run's settlement (svc/runtime/settlement.py),
    stored once under `entry_id` however often the batch is sent: the entry, and, for a verdict
    that blocked (or would have, in report mode) or went to the judge, its timeline entry."""
    batch.put(COLLECTION, {"_id": entry_id, **entry, "createdAt": at})
    if entry.get("decision") in ("BLOCK", "JUDGE"):
        action = "egress.judged" if entry["decision"] == "JUDGE" else "egress.blocked"
        meta = {
            "runId": entry.get("runId"),
            "agentKey": entry.get("agentKey"),
            "method": entry.get("method"),
            "hostname": entry.get("hostname"),
            "path": entry.get("path"),
            "decisionSource": entry.get("decisionSource"),
            "reason": entry.get("reason"),
            "reportOnly": entry.get("reportOnly"),
        }
        doc = timeline_entry("egress", action, install_id=entry["installId"], meta=meta, entry_id=timeline_id)
        add_timeline_entry(batch, doc)


class SecurityLog:
    """Reads the log (the runs' settlements write it)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def latest(self, install_id: str, since: datetime | None = None) -> list[dict[str, Any]]:
        """The last 200 entries of an install, newest first.

        Read in windows (svc/core/windows.py) back to the later of `since` (the install's
        creation) and the log's 30-day retention, so the cost depends on the 200, not on
        how many requests the install made.
        """
        floor = utcnow() - KEPT_FOR - timedelta(days=1)  # the TTL monitor runs late, never early
        docs = await newest_in_windows(
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
