"""Run records written in groups: concurrent reports in one process share their writes.

A run report used to cost six synced writes in the single-threaded embedded database
(the run, three counter upserts, the newest-runs push, the metrics counter), one after
another per report; at 64 clients the database, not the API, was the bound. Reports
arriving together now share them (group commit):

- each report adds its run record to this process's queue and waits for the lock;
- the holder writes everything queued so far: one `insert_many` (unordered: the unique
  `(installId, runId)` index still rejects a repeated report, and that report learns
  it is not new), one bulk write of the counters of the new runs with the increments
  of a counter summed (the reports of one install in one hour touch the same three
  counters), the newest-runs push, and the metrics counters;
- a report answers only once its own record and counters are stored, so nothing that
  was acknowledged is lost, and each new run is counted exactly once.

The group's writes run in a task of their own, shielded from the cancellation of the
request that happens to hold the lock (a client that hangs up), so a group is never
left half written by it. With one report at a time the cost is the same as before.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass, field

from pymongo.errors import BulkWriteError

from svc.core import DUPLICATE_KEY, Batch, Document, MetricChange, Store
from svc.runs import run_metrics, run_stats

COLLECTION = "runs"


@dataclass
class _Queue:
    """The run records waiting to be written by this process."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    pending: list[tuple[Document, asyncio.Future[bool]]] = field(default_factory=list)


_queues: weakref.WeakKeyDictionary[Store, _Queue] = weakref.WeakKeyDictionary()


def managed(batch: Batch, run: Document, tool_calls: tuple[int, int] = (0, 0)) -> None:
    """A managed run's record, its counters, its template's newest runs and the run metrics, as
    operations of `batch` (the run's settlement: svc/runtime/settlement.py). The record's `_id` is
    the run id, so sending the batch again stores nothing twice; the counters are guarded the same
    way (`run_stats.count_once`). Only the runtime writes a managed run's record: reports for a
    managed install are refused (svc/runs/runs.py)."""
    run = {**run, "_id": run["runId"]}
    batch.put(COLLECTION, run)
    run_stats.count_once(batch, run, tool_calls)


def metric_changes(runs: list[Document]) -> list[MetricChange | None]:
    """The run metrics of new records (see `run_metrics.recorded_many`), as counter changes."""
    return run_metrics.changes(runs)


async def add(store: Store, run: Document) -> bool:
    """Store a run record and count it; False when its (installId, runId) was already stored."""
    queue = _queues.setdefault(store, _Queue())
    answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    queue.pending.append((run, answer))
    async with queue.lock:
        if not answer.done():
            group, queue.pending = queue.pending, []
            await asyncio.shield(asyncio.ensure_future(_write(store, group)))
    return answer.result()


async def _write(store: Store, group: list[tuple[Document, asyncio.Future[bool]]]) -> None:
    """Write one group and settle every report's answer (a result or its own error)."""
    try:
        new = await _insert(store, group)
        if new:
            await run_stats.count_many(store, new)
            await run_metrics.recorded_many(store, new)
    except BaseException as exc:  # every waiter learns it; none waits forever
        for _, answer in group:
            if not answer.done():
                answer.set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
        if not isinstance(exc, Exception):
            raise
        return
    for _, answer in group:
        if not answer.done():
            answer.set_result(True)


async def _insert(store: Store, group: list[tuple[Document, asyncio.Future[bool]]]) -> list[Document]:
    """Insert the group's records; the new ones (a repeated report's answer is set to False)."""
    try:
        await store["runs"].insert_many([run for run, _ in group], ordered=False)
    except BulkWriteError as exc:
        failed: set[int] = set()
        for error in exc.details.get("writeErrors", []):
            index = error["index"]
            failed.add(index)
            answer = group[index][1]
            if error.get("code") == DUPLICATE_KEY:
                answer.set_result(False)
            else:
                answer.set_exception(RuntimeError(error.get("errmsg", "run record not stored")))
        return [run for index, (run, _) in enumerate(group) if index not in failed]
    return [run for run, _ in group]
