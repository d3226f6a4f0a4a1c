"""What the API and the dashboard ask of evals: run a suite, read scorecards and eval runs."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from svc.core import Document, NotFound, RequestBody, Store, iso
from svc.evals import scorecards
from svc.evals.suites import SuiteRunner
from svc.identity import Principal
from svc.runtime import eval_run_of
from svc.templates import Templates


class HistoryQuery(RequestBody):
    """GET /api/templates/:id/evals/scorecards."""

    version: int | None = Field(default=None, ge=1, le=2_147_483_647)


class Evals:
    """Eval suites of the caller's templates and version drafts (docs/evals.md)."""

    def __init__(self, store: Store, templates: Templates, runner: SuiteRunner) -> None:
        self.store = store
        self.templates = templates
        self.runner = runner

    async def run(self, principal: Principal, template_id: str) -> dict[str, Any]:
        """Run the suite of the caller's template or version draft, as it is now; its scorecard."""
        record = await self.templates.record(principal, template_id, own=True)
        return scorecards.view(await self.runner.run(principal, record, "manual"))

    async def history(self, principal: Principal, template_id: str, version: int | None) -> dict[str, Any]:
        """The template's scorecards, newest first (without their cases)."""
        root = await self._root(principal, template_id)
        cards = await scorecards.history(self.store, root, version)
        return {"scorecards": [scorecards.view({**card, "cases": []}) for card in cards]}

    async def scorecard(self, principal: Principal, template_id: str, card_id: str) -> dict[str, Any]:
        root = await self._root(principal, template_id)
        card = await scorecards.one(self.store, root, card_id)
        if card is None:
            raise NotFound("Scorecard not found")
        return scorecards.view(card)

    async def eval_run(self, principal: Principal, template_id: str, run_id: str) -> dict[str, Any]:
        """One case's run: its status, task, answer, tokens and events (the builder's own run)."""
        root = await self._root(principal, template_id)
        run = await eval_run_of(self.store, run_id)
        if run is None or (run.get("eval") or {}).get("templateId") != root:
            raise NotFound("Run not found")
        return run_view(run)

    async def _root(self, principal: Principal, template_id: str) -> str:
        """The template (a version draft's parent) whose scorecards the caller, its owner, reads."""
        record = await self.templates.record(principal, template_id, own=True)
        return str(record.get("parentTemplateId") or record["_id"])


def run_view(run: Document) -> dict[str, Any]:
    return {
        "runId": run["_id"],
        "status": run["status"],
        "task": run.get("task"),
        "response": run.get("response"),
        "errorMessage": run.get("errorMessage"),
        # Kept once its case closed it (resume clears it): where the run stopped.
        "pausedAtGate": run.get("pausedAtGate"),
        "inputTokens": int(run.get("inputTokens") or 0),
        "outputTokens": int(run.get("outputTokens") or 0),
        "replayOnly": bool(run.get("replayOnly")),
        "createdAt": iso(run.get("createdAt")),
        "endedAt": iso(run.get("endedAt")),
        "events": [
            {"seq": n, "type": e["type"], "at": iso(e["at"]), **(e.get("data") or {})}
            for n, e in enumerate(run.get("events") or [], 1)
        ],
    }
