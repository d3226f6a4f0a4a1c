"""Run records: what ran, on which install and agent, whether it succeeded, and its tokens.

Content is never recorded, only counts. A report with a runId is stored once per
install (a unique index), so platforms may retry reports safely: a repeated report
changes nothing and gets the same answer as the first.

Three ways in besides the managed runtime: the install-token ingest (platform
integrations push), the deployer's self-report, and the orchB poller (svc/run_poller.py).
Each goes through `Runs`, which also holds the one token rule: a template priced
per 1K tokens needs token counts, except on platforms that report none (orchB).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, model_validator

from svc.core import (
    BadRequest,
    Conflict,
    Document,
    InstallLookups,
    NotFound,
    RequestBody,
    RuntimeLookups,
    Store,
    new_id,
    utcnow,
)
from svc.runs import recording
from svc.templates import find_template

RunStatus = Literal["completed", "failed"]


def require_ready(install: Document) -> None:
    """409 unless the install is ready: a pending approval or a cancellation stops runs and reports."""
    if install["status"] != "completed":
        raise Conflict(f"Install is not ready (status: {install['status']})")


MANAGED_REPORT = (
    "This install runs on the managed runtime, which records every run itself; run reports are refused"
)
RUNTIME_RUN_ID = "This runId belongs to a run of the managed runtime, which records it itself"
# Far above any real run, far below the 64-bit sums of the counters.
MAX_TOKENS = 10**12


class SelfReportBody(RequestBody):
    """POST /api/installs/:installId/runs."""

    agentKey: str = Field(min_length=1, max_length=64)
    status: RunStatus
    inputTokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    outputTokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    runId: str | None = Field(default=None, min_length=1, max_length=200)
    errorMessage: str | None = Field(default=None, max_length=2000)


class IngestBody(RequestBody):
    """POST /api/runs/ingest: a platform integration's report of one finished run.

    The agent is named by the platform's own id (`platformAgentId`, an install's
    `deployedAgents[].externalId`) or, as the spec's run report allows, by `agentKey`.
    """

    platformAgentId: str | None = Field(default=None, min_length=1, max_length=200)
    agentKey: str | None = Field(default=None, min_length=1, max_length=64)
    platform: str = Field(min_length=1, max_length=64)
    runId: str = Field(min_length=1, max_length=200)
    status: RunStatus
    inputTokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    outputTokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    errorMessage: str | None = Field(default=None, max_length=2000)

    @model_validator(mode="after")
    def _names_an_agent(self) -> IngestBody:
        if self.platformAgentId is None and self.agentKey is None:
            raise ValueError("platformAgentId is required")
        return self


class InvokeBody(RequestBody):
    """POST /api/installs/:installId/invoke."""

    inputText: str = Field(min_length=1, max_length=100_000)
    sessionId: str | None = Field(default=None, min_length=1, max_length=200)


def record_of(
    install: Document,
    *,
    run_id: str,
    agent_key: str | None,
    status: str,
    source: str,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    error_message: str | None = None,
    platform_agent_id: str | None = None,
    created_at: datetime | None = None,
    platform_run_id: str | None = None,
    billable: bool = False,
    started_at: datetime | None = None,
    template_version: str | None = None,
) -> Document:
    """A run record: what ran, on which install and agent, its outcome and tokens (never content).

    `billable`: a failed run whose tokens are billed all the same (a managed run stopped by its
    per-run token cap); completed runs always are. `started_at`: when the install's actor began a
    managed run (its duration in the metrics). `template_version`: the version the run ran (a
    managed run keeps the version it started on across an upgrade)."""
    return {
        "_id": new_id(),
        "runId": run_id,
        "installId": install["_id"],
        "templateId": install["templateId"],
        "templateVersion": template_version or install["templateVersion"],
        "platform": install["platform"],
        "owner": install["owner"],
        "agentKey": agent_key,
        "platformAgentId": platform_agent_id,
        **({"platformRunId": platform_run_id} if platform_run_id else {}),
        "status": status,
        "inputTokens": input_tokens,
        "outputTokens": output_tokens,
        "errorMessage": error_message if status == "failed" else None,
        "source": source,
        "createdAt": created_at or utcnow(),
        **({"billable": True} if billable and status == "failed" else {}),
        **({"startedAt": started_at} if started_at else {}),
    }


class Runs:
    """Records runs and checks incoming run reports.

    `tokenless` names the platforms whose upstream reports no token counts (their
    `reports_tokens` trait is off): per_k_tokens billing does not apply there (spec).
    """

    def __init__(
        self,
        store: Store,
        tokenless: frozenset[str] = frozenset(),
        managed: frozenset[str] = frozenset(),
        *,
        installs: InstallLookups,
        runtime: RuntimeLookups,
    ) -> None:
        self.store = store
        # The answers of the packages above (svc/wiring.py hands them in): an install, and
        # whether the managed runtime holds a run.
        self.installs = installs
        self.runtime = runtime
        self.tokenless = tokenless
        # Platforms whose runs the managed runtime executes: it alone records them.
        self.managed = managed

    async def require_reportable(self, install: Document, run_id: str | None) -> None:
        """409 for a report the runtime must not be second-guessed on: any report for an install
        whose runs the managed runtime executes, and a report that names a run id of the runtime's
        own (an orchA heartbeat's run, by our id or the platform's). The runtime is the only source
        of a managed run's record, so a report can neither pre-empt nor replace it (docs/runs.md)."""
        if install["platform"] in self.managed:
            raise Conflict(MANAGED_REPORT)
        if run_id is not None and await self.runtime.is_runtime_run(install["_id"], run_id):
            raise Conflict(RUNTIME_RUN_ID)

    async def record(self, install: Document, **fields: Any) -> str:
        """Store one run (the keywords of `add`); a repeated runId is a no-op. Returns the run id."""
        run_id, _ = await self.add(install, **fields)
        return run_id

    async def add(
        self,
        install: Document,
        *,
        agent_key: str | None,
        status: RunStatus,
        source: str,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        error_message: str | None = None,
        run_id: str | None = None,
        platform_agent_id: str | None = None,
        created_at: datetime | None = None,
        platform_run_id: str | None = None,
        billable: bool = False,
        started_at: datetime | None = None,
    ) -> tuple[str, bool]:
        """Store one run: the run id, and whether it is new (False for a repeated runId).

        `billable`: a failed run whose tokens are billed all the same (a managed run stopped by its
        per-run token cap: the spend caps issue bills its tokens as usage); completed runs always are.
        `started_at`: when the install's actor began a managed run (its duration in the metrics)."""
        run_id = run_id or new_id()
        doc = record_of(
            install,
            run_id=run_id,
            agent_key=agent_key,
            status=status,
            source=source,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            error_message=error_message,
            platform_agent_id=platform_agent_id,
            created_at=created_at,
            platform_run_id=platform_run_id,
            billable=billable,
            started_at=started_at,
        )
        # Written with the reports arriving at the same time (svc/runs/recording.py); False
        # for the same report again.
        return run_id, await recording.add(self.store, doc)

    async def require_tokens(
        self, install: Document, input_tokens: int | None, output_tokens: int | None
    ) -> None:
        """400 when the install's template is priced per 1K tokens and a count is missing.

        The template's current pricing decides (pricing can change after install, and
        billing reads the current model); a platform that reports no tokens is exempt.
        """
        if install["platform"] in self.tokenless or (input_tokens is not None and output_tokens is not None):
            return
        template = await find_template(self.store, install["templateId"], "pricingModel")
        if template is None or template.get("pricingModel") != "per_k_tokens":
            return
        missing = [
            name
            for name, value in (("inputTokens", input_tokens), ("outputTokens", output_tokens))
            if value is None
        ]
        raise BadRequest(
            f"{' and '.join(missing)} required: this template is priced per 1K tokens (per_k_tokens)"
        )

    async def ingest(self, install_id: str, body: IngestBody) -> dict[str, Any]:
        """Record a run pushed by a platform integration (install-token auth); `{ok, runId}`.

        The install token names the install, so no owner check is needed beyond it; the
        body must match that install (platform, agent). A repeated runId answers the same.
        """
        install = await self.installs.find(install_id)
        if install is None:
            raise NotFound("Install not found")
        await self.require_reportable(install, body.runId)
        # A retry of a report already stored gets the first answer, even if the install has
        # changed since (a platform retrying after a lost response must not see an error).
        if await self.store["runs"].count_documents({"installId": install_id, "runId": body.runId}, limit=1):
            return {"ok": True, "runId": body.runId}
        if install["status"] == "cancelled":
            raise Conflict("Install is cancelled; it no longer accepts run reports")
        require_ready(install)
        if body.platform != install["platform"]:
            raise BadRequest(f"platform: this install is on {install['platform']}, not {body.platform}")
        agent_key = self._agent_key(install, body)
        await self.require_tokens(install, body.inputTokens, body.outputTokens)
        run_id = await self.record(
            install,
            agent_key=agent_key,
            status=body.status,
            source="ingest",
            input_tokens=body.inputTokens,
            output_tokens=body.outputTokens,
            error_message=body.errorMessage,
            run_id=body.runId,
            platform_agent_id=body.platformAgentId,
        )
        return {"ok": True, "runId": run_id}

    @staticmethod
    def _agent_key(install: Document, body: IngestBody) -> str:
        """The team agent the report names (by its platform id, or by key); 400 when unknown."""
        deployed = install.get("deployedAgents") or []
        if body.platformAgentId is not None:
            key = next((a["key"] for a in deployed if a.get("externalId") == body.platformAgentId), None)
            if key is None:
                raise BadRequest(f"platformAgentId: no agent {body.platformAgentId!r} in this install")
            if body.agentKey is not None and body.agentKey != key:
                raise BadRequest(f"agentKey: {body.agentKey!r} is not the agent {body.platformAgentId!r}")
            return str(key)
        keys = {agent["key"] for agent in install["definition"]["agents"]}
        if body.agentKey not in keys:
            raise BadRequest(f"agentKey: no agent {body.agentKey!r} in this install")
        return str(body.agentKey)
