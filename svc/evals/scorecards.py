"""Scorecards (`eval_scorecards`): one per suite run, of exactly one definition (its digest).

A scorecard holds each case's verdict (pass, fail or error, with the reason, its run, tokens,
cost, duration and policy verdicts), the totals and whether the suite's thresholds were met.
`summary` is the brief form shown with a published version (the public list and page).
"""

from __future__ import annotations

import hashlib
import json
from statistics import median
from typing import Any

from pymongo import DESCENDING

from svc.core import Document, Store, iso

SCORECARDS = "eval_scorecards"
# Scorecards a history lists at most (newest first).
HISTORY_MAX = 50


def digest(definition: dict[str, Any]) -> str:
    """The definition's identity: a scorecard is reused only for exactly the same definition."""
    return hashlib.sha256(json.dumps(definition, sort_keys=True, default=str).encode()).hexdigest()


def tally(suite: dict[str, Any], cases: list[Document]) -> Document:
    """Totals, pass rate and the thresholds' verdict of a suite's case results."""
    passed = [c for c in cases if c["status"] == "pass"]
    errors = [c for c in cases if c["status"] == "error"]
    failing = [c for c in cases if c["status"] == "fail"]
    rate = len(passed) / len(cases) if cases else 0.0
    threshold = float(suite.get("passRate", 1.0))
    must = [c["name"] for c in cases if c["mustPass"] and c["status"] != "pass"]
    ok = rate >= threshold and not must
    policy = [c for c in cases if c["policyChecks"]]
    live = [c for c in cases if not c["replayed"]] or cases
    return {
        "passed": ok,
        # error: the thresholds were missed, and runtime errors (not failures) are among the reasons
        "status": "passed" if ok else ("error" if errors else "failed"),
        "passRate": round(rate, 4),
        "threshold": threshold,
        "failing": [c["name"] for c in failing],
        "errors": [c["name"] for c in errors],
        "mustPassMissed": must,
        "totals": {
            "cases": len(cases),
            "passed": len(passed),
            "failed": len(failing),
            "errors": len(errors),
            "tokens": sum(c["tokens"] for c in cases),
            "spentTokens": sum(c["spentTokens"] for c in cases),
            "costCents": sum(c["costCents"] for c in cases),
            "medianTokens": int(median([c["tokens"] for c in live])) if live else 0,
            "medianCostCents": int(median([c["costCents"] for c in live])) if live else 0,
            "policyCases": len(policy),
            "policyPassed": sum(1 for c in policy if c["policyPassed"]),
        },
    }


def summary(card: Document) -> dict[str, Any]:
    """The brief form shown with a published version (ScorecardSummary)."""
    totals = card["totals"]
    return {
        "scorecardId": card["_id"],
        "version": card["version"],
        "passed": card["passed"],
        "passRate": card["passRate"],
        "cases": totals["cases"],
        "passedCases": totals["passed"],
        "errorCases": totals["errors"],
        "medianTokens": totals["medianTokens"],
        "medianCostCents": totals["medianCostCents"],
        "policyCases": totals["policyCases"],
        "policyPassed": totals["policyPassed"],
        "createdAt": iso(card["createdAt"]),
    }


def view(card: Document) -> dict[str, Any]:
    """A scorecard as the API answers it (Scorecard)."""
    return {
        "id": card["_id"],
        "templateId": card["templateId"],
        "recordId": card["recordId"],
        "version": card["version"],
        "digest": card["digest"],
        "trigger": card["trigger"],
        "status": card["status"],
        "passed": card["passed"],
        "passRate": card["passRate"],
        "threshold": card["threshold"],
        "failing": card["failing"],
        "errors": card["errors"],
        "mustPassMissed": card["mustPassMissed"],
        "totals": card["totals"],
        "cases": card["cases"],
        "createdAt": iso(card["createdAt"]),
    }


async def store_card(store: Store, card: Document) -> None:
    await store[SCORECARDS].insert_one(card)


async def of_definition(store: Store, template_id: str, the_digest: str) -> Document | None:
    """The newest scorecard of exactly this definition of the template."""
    return await store[SCORECARDS].find_one(
        {"templateId": template_id, "digest": the_digest}, sort=[("createdAt", DESCENDING)]
    )


async def history(store: Store, template_id: str, version: int | None = None) -> list[Document]:
    """The template's scorecards, newest first (one version's with `version`)."""
    query: Document = {"templateId": template_id}
    if version is not None:
        query["version"] = version
    cursor = store[SCORECARDS].find(query, {"cases": 0}).sort("createdAt", DESCENDING).limit(HISTORY_MAX)
    return await cursor.to_list(HISTORY_MAX)


async def one(store: Store, template_id: str, card_id: str) -> Document | None:
    return await store[SCORECARDS].find_one({"_id": card_id, "templateId": template_id})
