"""Running a template's eval suite, and the publish gate (docs/evals.md).

Every case is a managed run of exactly the record's definition on the real runtime (an eval run:
svc/runtime/eval_runs.py, in the builder's eval worker), at most SVC_EVAL_CONCURRENCY at once.
Before any case starts the suite's live cases are taken from the builder's monthly eval budget,
and every replayed case's recording is found; then each run is scored (svc/evals/checks.py) and
the scorecard stored. A case whose run failed for a runtime reason (the provider down, the
worker lost, a recording that cannot answer) is an error, not a failure.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from svc.core import (
    BadRequest,
    Document,
    Governance,
    NotFound,
    RuntimeFailure,
    Store,
    Unprocessable,
    new_id,
    utcnow,
)
from svc.evals import budget
from svc.evals.checks import facts_of, is_policy, judge, pricing_of, verdict
from svc.evals.scorecards import digest, of_definition, store_card, summary, tally
from svc.identity import Principal
from svc.installs import Installs
from svc.runtime import (
    LLM,
    RUNTIME_FAILURES,
    RunService,
    eval_run_of,
    is_eval_install,
    new_eval_run,
    recorded_journal,
)
from svc.templates import VARIABLE_REFERENCE, note_scorecard

log = logging.getLogger(__name__)

ORG_REQUIRES_SUITE = (
    "Your organisation publishes templates only with an eval suite that passes: add `evals` to "
    "the definition (docs/evals.md)"
)


@dataclass(frozen=True)
class EvalLimits:
    """What bounds suite runs, from settings."""

    judge_model: str
    monthly_runs: int
    concurrency: int


class SuiteRunner:
    """Runs suites and answers the publish gate."""

    def __init__(
        self,
        store: Store,
        run_service: RunService,
        installs: Installs,
        llm: LLM,
        limits: EvalLimits,
        governance: Governance | None = None,
    ) -> None:
        self.governance = governance  # an org may require a passing suite of every publish
        self.store = store
        self.run_service = run_service
        self.installs = installs
        self.llm = llm
        self.limits = limits

    async def run(self, principal: Principal, record: Document, trigger: str) -> Document:
        """Run the record's suite; the stored scorecard."""
        definition = record["definition"]
        suite = definition.get("evals")
        if not suite:
            raise BadRequest("definition.evals: the template has no eval suite")
        owner = record["owner"]
        root = record.get("parentTemplateId") or record["_id"]
        replays = await self._replays(principal, owner, suite["cases"])
        live = len(suite["cases"]) - len(replays)
        await budget.claim(self.store, owner, live, self.limits.monthly_runs)
        gate = asyncio.Semaphore(self.limits.concurrency)

        async def bounded(index: int, case: Document) -> Document:
            async with gate:
                return await self._case(owner, root, record, case, replays.get(index))

        results = await asyncio.gather(*(bounded(i, c) for i, c in enumerate(suite["cases"])))
        card = {
            "_id": new_id(),
            "templateId": root,
            "recordId": record["_id"],
            "version": record["version"],
            "digest": digest(definition),
            "owner": owner,
            "trigger": trigger,
            "createdAt": utcnow(),
            "cases": list(results),
            **tally(suite, list(results)),
        }
        await store_card(self.store, card)
        if record["kind"] == "template" and record["status"] == "published":
            await note_scorecard(self.store, root, record["version"], summary(card))
        return card

    async def gate(self, principal: Principal, record: Document) -> dict[str, Any] | None:
        """Before a publish: a required suite must pass (the newest scorecard of exactly this
        definition when it has no errors, else a new run); 422 listing failing and erroring
        cases otherwise. The summary the version is published with (None: no scorecard)."""
        suite = record["definition"].get("evals")
        by_org = self.governance is not None and await self.governance.requires_eval_suite(record["owner"])
        if by_org and not suite:
            raise Unprocessable(ORG_REQUIRES_SUITE)
        root = record.get("parentTemplateId") or record["_id"]
        card = await of_definition(self.store, root, digest(record["definition"]))
        if not suite or not (suite.get("required") or by_org):
            return {**summary(card), "version": record["version"]} if card else None
        if card is None or card["errors"]:
            card = await self.run(principal, record, "publish")
        if not card["passed"]:
            raise Unprocessable(
                refusal(card), scorecardId=card["_id"], failing=card["failing"], errors=card["errors"]
            )
        return {**summary(card), "version": record["version"]}

    async def _replays(
        self, principal: Principal, owner: Document, cases: list[Document]
    ) -> dict[int, list[Document]]:
        """Each replayed case's recorded journal, found before anything runs: an eval run of the
        builder's, or a run of an install the caller reaches (400 naming the case otherwise)."""
        found: dict[int, list[Document]] = {}
        for index, case in enumerate(cases):
            if not case.get("replay"):
                continue
            at = f"definition.evals.cases[{index}].replay.runId"
            recorded = await recorded_journal(self.store, case["replay"]["runId"])
            if recorded is None:
                raise BadRequest(f"{at}: no recorded run with this id")
            install_id, journal = recorded
            if is_eval_install(install_id):
                if install_id != f"eval-{owner['kind']}-{owner['id']}":
                    raise BadRequest(f"{at}: no recorded run with this id")
            else:
                try:
                    await self.installs.owned(principal, install_id)
                except NotFound:
                    raise BadRequest(f"{at}: no recorded run with this id") from None
            if not any(e.get("kind") == "model" for e in journal):
                raise BadRequest(f"{at}: the recorded run made no model call to replay")
            found[index] = journal
        return found

    async def _case(
        self, owner: Document, root: str, record: Document, case: Document, replay: list[Document] | None
    ) -> Document:
        """Run one case and score it."""
        variables = case.get("variables") or {}
        task = VARIABLE_REFERENCE.sub(lambda m: variables.get(m.group(1), m.group(0)), case["task"])
        run = new_eval_run(owner, root, record["definition"], task, variables, replay)
        result: Document = {
            "name": case["name"],
            "mustPass": bool(case.get("mustPass")),
            "runId": run["_id"],
            "replayed": replay is not None,
            "status": "error",
            "reason": "",
            "checks": [],
            "tokens": 0,
            "spentTokens": 0,
            "judgeTokens": 0,
            "modelCalls": 0,
            "costCents": 0,
            "durationMs": None,
            "policyChecks": sum(1 for c in case["checks"] if is_policy(c)),
            "policyPassed": False,
        }
        started = time.monotonic()
        try:
            await self.run_service.run_eval(run)
        except RuntimeFailure as exc:
            return {**result, "reason": f"runtime: {exc}"}
        doc = await eval_run_of(self.store, run["_id"])
        if doc is None or doc["status"] in ("queued", "running"):
            return {**result, "reason": "runtime: the run did not end in time"}
        replayed = sum(1 for e in replay or [] if e.get("kind") == "model")
        facts = facts_of(doc, pricing_of(record), replayed)
        result.update(
            tokens=facts.tokens,
            spentTokens=facts.spent_tokens,
            modelCalls=facts.spent_calls,
            costCents=facts.cost_cents,
            durationMs=facts.duration_ms or int((time.monotonic() - started) * 1000),
        )
        if facts.status == "failed" and any((facts.error or "").startswith(m) for m in RUNTIME_FAILURES):
            return {**result, "reason": f"runtime: {facts.error}"}
        checks, errored = [], False
        for check in case["checks"]:
            if check["kind"] == "judge":
                model = check.get("model") or self.limits.judge_model
                passed, reason, spent = await judge(self.llm, model, check, task, facts.response or "")
                result["judgeTokens"] += spent
                errored = errored or passed is None
            else:
                passed, reason = verdict(check, facts)
            checks.append(
                {"kind": check["kind"], "passed": passed, "reason": reason, "policy": is_policy(check)}
            )
        if doc["status"] == "paused":
            await self._close(doc)
        failed = [c for c in checks if c["passed"] is False]
        policy = [c for c in checks if c["policy"]]
        result.update(checks=checks, policyPassed=bool(policy) and all(c["passed"] for c in policy))
        if failed:
            return {
                **result,
                "status": "fail",
                "reason": "; ".join(f"{c['kind']}: {c['reason']}" for c in failed),
            }
        if errored:
            return {
                **result,
                "reason": "runtime: " + "; ".join(c["reason"] for c in checks if c["passed"] is None),
            }
        return {**result, "status": "pass", "reason": "every check passed"}

    async def _close(self, run: Document) -> None:
        """End a case's run left paused at a gate, once judged: no eval run waits for a person
        (its worker would otherwise keep it, and read it on every start, for ever)."""
        try:
            await self.run_service.close_eval_run(run)
        except RuntimeFailure as exc:  # the case's verdict stands; the run stays paused, as before
            log.warning("eval run %s stays paused: %s", run["_id"], exc)


def refusal(card: Document) -> str:
    """Why a publish was refused, naming the cases."""
    parts = [f"pass rate {card['passRate']:.0%} (needs {card['threshold']:.0%})"]
    if card["failing"]:
        parts.append("failing: " + ", ".join(card["failing"]))
    if card["mustPassMissed"]:
        parts.append("mustPass not passed: " + ", ".join(card["mustPassMissed"]))
    if card["errors"]:
        parts.append("errors (runtime, not failures; run the suite again): " + ", ".join(card["errors"]))
    return "The eval suite did not pass: " + "; ".join(parts)
