"""Eval runs (docs/evals.md): a managed run that carries the definition it tests.

An eval case runs on the real runtime, in an install actor, through the same ledger, journal and
settlement as any run, but it has no install record: the run itself carries the definition under
test, the case's variables and the builder who owns it (`eval`), and its actor is the builder's
eval worker (install id `eval-<owner kind>-<owner id>`, one per builder, never listed anywhere).
So an eval never creates, counts or bills an install: its run is `source: "eval"`, and its end
owes only its steps (no run record, no counters, no `lastRunAt`: it is not template usage).

A replayed case (`replayOnly`) starts with a recorded run's model answers and tool results as its
journal; a model call the recording cannot answer fails the run with `ReplayMismatch` instead of
calling a model (svc/runtime/agent_loop.py). A recorded `http_request` is judged again by the
access policy of the definition under test: denied, it is blocked and logged as such; allowed, it
gets the recorded answer without being sent.
"""

from __future__ import annotations

from typing import Any

from svc.core import Document, Store, utcnow
from svc.runtime import ledger

EVAL_PREFIX = "eval-"
# A replayed case's journal: what answers calls (not the recording's agent ends, which would skip
# the new definition's loops altogether).
REPLAYED_KINDS = ("model", "tool")


def eval_install_id(owner: Document) -> str:
    """The builder's eval worker: one install actor per builder, for every eval run of theirs."""
    return f"{EVAL_PREFIX}{owner['kind']}-{owner['id']}"


def is_eval_install(install_id: str) -> bool:
    return install_id.startswith(EVAL_PREFIX)


def new_eval_run(
    owner: Document,
    template_id: str,
    definition: dict[str, Any],
    task: str,
    variables: dict[str, str],
    replay: list[Document] | None = None,
) -> Document:
    """A queued eval run of exactly `definition`, with `variables` in its prompts."""
    # Marked `recording`: a recorded tool call is judged again by this definition's policy.
    journal = [
        {k: v for k, v in entry.items() if k not in ("at", "security", "securityId", "timelineId")}
        | {"at": utcnow(), "recording": True}
        for entry in replay or []
        if entry.get("kind") in REPLAYED_KINDS
    ]
    return ledger.new_run(
        eval_install_id(owner),
        task,
        "eval",
        handoffAt=utcnow(),
        journal=journal,
        replayOnly=replay is not None,
        eval={
            "owner": owner,
            "templateId": template_id,
            "definition": definition,
            "variables": variables,
        },
    )


def eval_install(run: Document) -> Document | None:
    """The install an eval run stands for (built from the run; never stored); None for other runs."""
    spec = run.get("eval")
    if not spec:
        return None
    return {
        "_id": run["installId"],
        "status": "completed",
        "platform": "svc",
        "templateId": spec["templateId"],
        "owner": spec["owner"],
        "definition": spec["definition"],
        "variables": spec.get("variables") or {},
        "eval": True,
    }


async def eval_run_of(store: Store, run_id: str) -> Document | None:
    """An eval run's ledger entry (events, journal, totals), for its scorecard."""
    run = await ledger.get(store, run_id, heavy=True)
    return run if run is not None and run.get("source") == "eval" else None


async def recorded_journal(store: Store, run_id: str) -> tuple[str, list[Document]] | None:
    """A stored run's install and journal, to replay a case from; None when unknown."""
    run = await ledger.get(store, run_id, heavy=True)
    if run is None:
        return None
    return run["installId"], list(run.get("journal") or [])

