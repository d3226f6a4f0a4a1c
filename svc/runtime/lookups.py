"""What other packages read of the runtime's records: the runtime owns `pipeline_runs` and
`schedules`; runs and installs (below it) are handed `RuntimeReads` by the composition root
(svc/wiring.py) as their `svc.core.RuntimeLookups` (tests/test_architecture.py, ownership)."""

from __future__ import annotations

import asyncio
from typing import Any

from svc.core import Store
from svc.runtime.ledger import RUNS


async def is_runtime_run(store: Store, install_id: str, run_id: str) -> bool:
    """Whether the managed runtime holds a run of this id (or platform run id) for the install.

    Asked before every run report and ingest. Two point reads side by side, each served by an
    index: one filter with `$or` read every run of the ledger on the embedded server (50 ms at
    3,000 runs, growing with every run ever made; bench/load.py's reports)."""
    by_id, by_platform = await asyncio.gather(
        store[RUNS].find_one({"_id": run_id}, {"installId": 1}),
        store[RUNS].find_one({"installId": install_id, "platformRunId": run_id}, {"_id": 1}),
    )
    return (by_id is not None and by_id.get("installId") == install_id) or by_platform is not None


async def next_runs(store: Store, install_ids: list[str]) -> dict[str, Any]:
    """Install id -> the next fire of its enabled schedule (installs with none are absent)."""
    # By _id alone (an `enabled` condition beside it would scan every schedule).
    cursor = store["schedules"].find({"_id": {"$in": install_ids}}, {"nextRunAt": 1, "enabled": 1})
    return {d["_id"]: d.get("nextRunAt") for d in await cursor.to_list(None) if d.get("enabled") is True}


class RuntimeReads:
    """The runtime's answers for the packages below it (svc.core.RuntimeLookups)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def is_runtime_run(self, install_id: str, run_id: str) -> bool:
        return await is_runtime_run(self.store, install_id, run_id)

    async def next_runs(self, install_ids: list[str]) -> dict[str, Any]:
        return await next_runs(self.store, install_ids)
