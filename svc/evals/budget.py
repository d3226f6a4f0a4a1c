"""The per-builder monthly eval budget (SVC_EVAL_MONTHLY_RUNS, docs/evals.md).

A suite run claims its live cases (a replayed case makes no model call and costs nothing) in
ONE conditional update of the builder's month record before any case starts, so suites started
together cannot all pass a budget only one fits.
"""

from __future__ import annotations

from pymongo.errors import DuplicateKeyError

from svc.core import Conflict, Document, Store, utcnow

BUDGETS = "eval_budgets"


def month_key(owner: Document) -> str:
    return f"{owner['kind']}:{owner['id']}:{utcnow().strftime('%Y-%m')}"


async def claim(store: Store, owner: Document, runs: int, limit: int) -> None:
    """Take `runs` eval runs from this month's budget; 409 naming what is left when it cannot."""
    if runs == 0:
        return
    key = month_key(owner)
    for _ in range(2):
        taken = await store[BUDGETS].update_one(
            {"_id": key, "used": {"$lte": limit - runs}}, {"$inc": {"used": runs}, "$set": {"at": utcnow()}}
        )
        if taken.modified_count:
            return
        if runs <= limit and await store[BUDGETS].count_documents({"_id": key}, limit=1) == 0:
            try:
                await store[BUDGETS].insert_one({"_id": key, "used": runs, "at": utcnow()})
                return
            except DuplicateKeyError:
                continue  # another suite made the month's record first: claim against it
        break
    used = await used_this_month(store, owner)
    raise Conflict(
        f"Monthly eval budget exceeded: this suite needs {runs} eval run(s) and {max(0, limit - used)} "
        f"of {limit} are left this month",
        evalRunsNeeded=runs,
        evalRunsLeft=max(0, limit - used),
        evalRunsPerMonth=limit,
    )


async def used_this_month(store: Store, owner: Document) -> int:
    doc = await store[BUDGETS].find_one({"_id": month_key(owner)})
    return int((doc or {}).get("used") or 0)
