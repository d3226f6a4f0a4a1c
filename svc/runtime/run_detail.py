"""What happened in one run: `GET /api/installs/:installId/runs/:runId` (docs/runs.md).

One answer for every platform. A managed run is assembled from its ledger
(`pipeline_runs`), its steps (`agent_runs`), its live events (`run_events`: model,
iterations, the task and the final response), its security-log entries, its run record
(`runs`: what billing counts) and its webhook callback's deliveries (`callbacks`). A run
reported by another platform has a run record only, so the fields that platform cannot
give are null.

Who sees what: whoever reaches the install (svc.installs.reach) sees everything; the
builder of the install's template sees the same run without the task and the response
(and without the callback's URL), unless the builder also reaches the install. Anyone
else, and a run of another install: 404.

The reads run concurrently (one round trip of latency after the install), each bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

from plugins import tracing
from svc.core import Document, NotFound, OrgLookups, Store, aware, iso
from svc.identity import Principal
from svc.installs import builder_reaches, find_install, reaches
from svc.runs import find_record
from svc.runtime import run_lists
from svc.runtime.journal import wire
from svc.runtime.ledger import RUNS
from svc.runtime.security_log import RUN_ENTRY_FIELDS
from svc.templates import find_template

# (pricing model, price in cents, completed?, tokens) -> the run's cost (svc.billing.run_cost);
# injected, because billing sits above the runtime.
Costing = Callable[[str, int | None, bool, int], dict[str, Any]]
MAX_STEPS = 200
MAX_SECURITY = 200


class RunDetail:
    """Answers "what happened in run X"."""

    def __init__(
        self,
        store: Store,
        costing: Costing | None = None,
        trace_url: str | None = None,
        *,
        orgs: OrgLookups,
    ) -> None:
        self.store = store
        self.orgs = orgs  # org membership, for the reach rule (svc/wiring.py hands it in)
        self.costing = costing
        self.trace_url = trace_url  # SVC_TRACE_URL: the run's trace link (tracing, #33)

    async def access(self, principal: Principal, install_id: str) -> tuple[Document, bool]:
        """The install and whether the caller sees the deployer's content; 404 for anyone else."""
        install = await find_install(self.store, install_id)
        if install is not None and await reaches(self.orgs, principal, install):
            return install, True
        if install is not None and await builder_reaches(self.store, principal, install):
            return install, False
        raise NotFound("Install not found")

    async def exists(self, install_id: str, run_id: str) -> Document | None:
        """The run's ledger entry (a managed run), or its run record; None when neither exists."""
        ledger = await self.store[RUNS].find_one(
            {"_id": run_id, "installId": install_id}, {"journal": 0, "events": 0}
        )
        if ledger is not None:
            return ledger
        return await find_record(self.store, install_id, run_id)

    async def get(self, principal: Principal, install_id: str, run_id: str) -> dict[str, Any]:
        """The run detail (see the module's docstring)."""
        install, full = await self.access(principal, install_id)
        ledger, record, callback, template = await asyncio.gather(
            self.store[RUNS].find_one({"_id": run_id, "installId": install_id}),
            find_record(self.store, install_id, run_id),
            self.store["callbacks"].find_one({"_id": run_id, "installId": install_id}),
            find_template(self.store, install["templateId"], "pricingModel", "priceUsdCents"),
        )
        if ledger is None and record is None:
            raise NotFound("Run not found")
        models = {a["key"]: a.get("model") for a in install["definition"]["agents"]}
        journal = (ledger or {}).get("journal") or []
        events = [wire(n, e) for n, e in enumerate((ledger or {}).get("events") or [], 1)]
        first = next((e for e in events if e["type"] == "run_started"), {})
        step_list = (
            managed_steps(journal, models)[:MAX_STEPS]
            if ledger is not None
            else reported_step(record, models)
        )
        detail = {
            "runId": run_id,
            "installId": install_id,
            "templateId": install["templateId"],
            "platform": install["platform"],
            "view": "deployer" if full else "builder",
            # Without a ledger entry the run record exists (the 404 above).
            **(
                ledger_fields(ledger, record) if ledger is not None else record_fields(cast(Document, record))
            ),
            "task": (ledger or {}).get("task", first.get("task")) if full else None,
            "response": (ledger or {}).get("response") if full else None,
            "steps": step_list,
            "tokensByAgent": tokens_by_agent(step_list),
            "security": [security_entry(e) for e in journal if e.get("security")][
                :MAX_SECURITY
            ],
            "cost": self._cost(template, record),
            "callback": callback_view(callback, full),
            # The run's trace (tracing, #33): traceId and traceUrl, null when it was not traced.
            **tracing.detail_fields((ledger or {}).get("trace"), self.trace_url),
        }
        if ledger is not None and ledger["status"] == "queued":
            detail["queuePosition"] = await self._queue_position(ledger)
        return detail

    async def newest(self, install: Document, limit: int = run_lists.NEWEST_MAX) -> list[dict[str, Any]]:
        """The newest runs of an install the caller reaches (`Installs.owned`), newest first: the
        dashboard's runs table and badge (svc/runtime/run_lists.py)."""
        return await run_lists.newest_runs(self.store, install, limit)

    async def paused(self, install_id: str) -> list[dict[str, Any]]:
        """The paused runs of an install the caller reaches, each with the call it stopped at."""
        return await run_lists.paused_runs(self.store, install_id)

    async def _queue_position(self, ledger: Document) -> int:
        """1 for the oldest run of the deployment still waiting to start: a run waits behind
        every run queued before it, whichever install it is of (a full cluster starts them in
        about that order). Bounded: it matches only queued runs, which start or expire
        (SVC_RUN_HANDOFF_SECONDS); the (status, createdAt) index covers the filter."""
        ahead = await self.store[RUNS].count_documents(
            {"status": "queued", "createdAt": {"$lt": ledger["createdAt"]}}
        )
        return ahead + 1

    def _cost(self, template: Document | None, record: Document | None) -> dict[str, Any] | None:
        """The run's cost to the deployer once it has a run record (what billing counts)."""
        if record is None or template is None or self.costing is None:
            return None
        tokens = (record.get("inputTokens") or 0) + (record.get("outputTokens") or 0)
        completed = record["status"] == "completed"
        return self.costing(
            template.get("pricingModel", "free"), template.get("priceUsdCents"), completed, tokens
        )


def _ms(start: Any, end: Any) -> int | None:
    if start is None or end is None:
        return None
    return int((aware(end) - aware(start)).total_seconds() * 1000)


def ledger_fields(ledger: Document, record: Document | None) -> dict[str, Any]:
    """Status, source, timings and totals of a managed run."""
    status = ledger["status"]
    started, ended = ledger.get("startedAt"), ledger.get("endedAt")
    return {
        "status": status,
        "source": ledger.get("source") or (record or {}).get("source"),
        "retryOf": ledger.get("retryOf"),
        "agent": ledger.get("agentKey") or (record or {}).get("agentKey"),
        "errorMessage": ledger.get("errorMessage"),
        "pausedAtGate": ledger.get("pausedAtGate") if status == "paused" else None,
        "createdAt": iso(ledger.get("createdAt")),
        "startedAt": iso(started),
        "endedAt": iso(ended),
        "durationMs": _ms(started, ended),
        "inputTokens": ledger.get("inputTokens", (record or {}).get("inputTokens")),
        "outputTokens": ledger.get("outputTokens", (record or {}).get("outputTokens")),
        "platformRunId": ledger.get("platformRunId"),
    }


def record_fields(record: Document) -> dict[str, Any]:
    """The same fields from a reported run (another platform): what it cannot say is null."""
    return {
        "status": record["status"],
        "source": record.get("source"),
        "retryOf": None,
        "agent": record.get("agentKey"),
        "errorMessage": record.get("errorMessage"),
        "pausedAtGate": None,
        "createdAt": iso(record.get("createdAt")),
        "startedAt": None,
        "endedAt": iso(record.get("createdAt")),
        "durationMs": None,
        "inputTokens": record.get("inputTokens"),
        "outputTokens": record.get("outputTokens"),
        "platformRunId": record.get("platformRunId"),
    }


def managed_steps(journal: list[Document], models: dict[str, str | None]) -> list[dict[str, Any]]:
    """Each agent step that ended, in the order the steps began, from the run's journal."""
    ended = [e for e in journal if e.get("kind") == "agent"]
    ended.sort(key=lambda e: aware(e["startedAt"]) if e.get("startedAt") else aware(e["at"]))
    return [
        {
            "agent": entry["agent"],
            "model": entry.get("model") or models.get(entry["agent"]),
            "status": entry.get("status"),
            "iterations": entry.get("iterations"),
            "inputTokens": entry.get("in"),
            "outputTokens": entry.get("out"),
            "durationMs": _ms(entry.get("startedAt"), entry.get("endedAt")),
            "startedAt": iso(entry.get("startedAt")),
            "endedAt": iso(entry.get("endedAt")),
            "error": entry.get("error"),
        }
        for entry in ended
    ]


def reported_step(record: Document | None, models: dict[str, str | None]) -> list[dict[str, Any]]:
    """A reported run as one step of its agent (the platform reports no finer grain)."""
    if record is None or record.get("agentKey") is None:
        return []
    return [
        {
            "agent": record["agentKey"],
            "model": models.get(record["agentKey"]),
            "status": record["status"],
            "iterations": None,
            "inputTokens": record.get("inputTokens"),
            "outputTokens": record.get("outputTokens"),
            "durationMs": None,
            "startedAt": None,
            "endedAt": iso(record.get("createdAt")),
            "error": record.get("errorMessage"),
        }
    ]


def tokens_by_agent(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Token totals per agent, in the order the agents first ran (null where none were reported)."""
    totals: dict[str, dict[str, Any]] = {}
    for step in steps:
        row = totals.setdefault(
            step["agent"], {"agent": step["agent"], "inputTokens": None, "outputTokens": None}
        )
        for name in ("inputTokens", "outputTokens"):
            if step[name] is not None:
                row[name] = (row[name] or 0) + step[name]
    return list(totals.values())


def security_entry(entry: Document) -> dict[str, Any]:
    """One outbound request of the run (from its journal), as GET .../security/requests shows it."""
    security = entry["security"]
    return {
        "id": entry.get("securityId"),
        **{k: security.get(k) for k in RUN_ENTRY_FIELDS},
        "createdAt": iso(entry.get("at")),
    }


def _when(value: Any) -> str | None:
    """A stored time (a datetime, or already a string) on the wire."""
    return value if value is None or isinstance(value, str) else iso(value)


def callback_view(doc: Document | None, full: bool) -> dict[str, Any] | None:
    """The webhook callback's delivery record (written by svc/runtime/callbacks.py); the URL is
    the deployer's and is left out of the builder's view."""
    if doc is None:
        return None
    return {
        "url": doc.get("url") if full else None,
        "status": doc.get("status"),
        "attempts": [
            {
                "at": _when(a.get("at")),
                "status": a.get("status"),
                "latencyMs": a.get("latencyMs"),
                "error": a.get("error"),
            }
            for a in doc.get("attempts") or []
        ],
        "nextAttemptAt": _when(doc.get("nextAttemptAt")),
        "createdAt": _when(doc.get("createdAt")),
    }
