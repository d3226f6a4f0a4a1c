"""Run records: what ran, on which install and agent, whether it succeeded, and its tokens.

Content is never recorded, only counts. A report with a runId is stored once per
install (a unique index), so platforms may retry reports safely.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field
from pymongo.errors import DuplicateKeyError

from svc import tokens
from svc.clock import utcnow
from svc.models import RequestBody
from svc.store import Document, Store

RunStatus = Literal["completed", "failed"]


class SelfReportBody(RequestBody):
    """POST /api/installs/:installId/runs."""

    agentKey: str = Field(min_length=1, max_length=64)
    status: RunStatus
    inputTokens: int | None = Field(default=None, ge=0)
    outputTokens: int | None = Field(default=None, ge=0)
    runId: str | None = Field(default=None, min_length=1, max_length=200)
    errorMessage: str | None = Field(default=None, max_length=2000)


class InvokeBody(RequestBody):
    """POST /api/installs/:installId/invoke."""

    inputText: str = Field(min_length=1, max_length=100_000)
    sessionId: str | None = Field(default=None, min_length=1, max_length=200)


class Runs:
    """Records runs (reads arrive with observability)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def record(
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
    ) -> str:
        """Store one run; a repeated runId for the same install is a no-op. Returns the run id."""
        run_id = run_id or tokens.new_id()
        doc: dict[str, Any] = {
            "_id": tokens.new_id(),
            "runId": run_id,
            "installId": install["_id"],
            "templateId": install["templateId"],
            "templateVersion": install["templateVersion"],
            "platform": install["platform"],
            "owner": install["owner"],
            "agentKey": agent_key,
            "platformAgentId": platform_agent_id,
            "status": status,
            "inputTokens": input_tokens,
            "outputTokens": output_tokens,
            "errorMessage": error_message if status == "failed" else None,
            "source": source,
            "createdAt": utcnow(),
        }
        try:
            await self.store["runs"].insert_one(doc)
        except DuplicateKeyError:
            pass  # the same report again
        return run_id
