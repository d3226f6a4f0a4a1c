"""The one routine that stores a queued run and hands it to its install's actor (the API's
start, webhook, heartbeat and retry; the scheduler's fires; the job runner's late hand-overs).

A synchronous caller waits for the run's end here: from the actor's answer, or, when the run
moved to a new copy of its actor (a crash, a newer copy taking over), from the ledger
(svc/runtime/ledger.py), until the run is settled and its record stored.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from svc.core import Document, RunOutcome, Runtime, RuntimeFailure, StartRun, Store
from svc.runtime.ledger import NOT_STARTED, enqueue, fail_queued, paid_up, standing

# How often a caller whose run moved to a new copy of its actor reads where it stands.
RESUMED_POLL_S = 0.2

log = logging.getLogger(__name__)


class HandOver:
    """Stores queued runs and hands them to their install's actor (`runtime` None: nothing is
    handed over; a synchronous run then fails with RuntimeFailure)."""

    def __init__(self, store: Store, runtime: Runtime | None) -> None:
        self.store = store
        self.runtime = runtime
        self._background: set[asyncio.Future[Any]] = set()

    async def start(self, run: Document, wait_s: float | None) -> RunOutcome:
        """Store the run and hand it over. `wait_s` None: in the background, and the answer is the
        queued run at once. Otherwise wait up to `wait_s` for its end or gate (then its state;
        the run goes on). When the actor dies during the run (or a newer copy takes it over), the
        next copy resumes it from its journal: the caller waits for its real end here."""
        if wait_s is not None and self.runtime is None:
            raise RuntimeFailure("The runtime is not available")
        await enqueue(self.store, run)
        if self.runtime is None:
            return RunOutcome(run["_id"], "queued")
        if wait_s is None:  # handed over in the background: the caller has its answer now
            handing = asyncio.ensure_future(self.runtime.submit(run["installId"], StartRun(run)))
            self._background.add(handing)
            handing.add_done_callback(self._ended)
            return RunOutcome(run["_id"], "queued")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        try:
            outcome = await self.runtime.run(run["installId"], StartRun(run), wait_s)
            if outcome.settled:
                return outcome  # the actor that ran it answers once its record is stored
        except RuntimeFailure:
            if await fail_queued(self.store, run["_id"], NOT_STARTED, []):
                raise  # never handed over: it must not start later
        # Answered by the ledger (the run moved to another copy): its end and its record, as the
        # actor's own answer would have it.
        while True:
            outcome = await standing(self.store, run["_id"])
            if (outcome.settled and await paid_up(self.store, run["_id"])) or loop.time() >= deadline:
                return outcome
            await asyncio.sleep(RESUMED_POLL_S)

    def later(self, run: Document) -> None:
        """Hand a stored run over in the background: the caller has its answer already."""
        handing = asyncio.ensure_future(self.now(run))
        self._background.add(handing)
        handing.add_done_callback(self._ended)

    async def now(self, run: Document) -> bool:
        """Hand a stored run over; False (logged) when the actor cannot be reached: it stays
        queued for the job runner."""
        if self.runtime is None:
            return False
        try:
            await self.runtime.submit(run["installId"], StartRun(run))
        except RuntimeFailure as exc:
            log.warning("run not handed over yet (%s); the job runner tries again", exc)
            return False
        return True

    async def all_now(self, runs: list[Document]) -> None:
        """Hand stored runs over side by side (a scheduler tick's)."""
        await asyncio.gather(*(self.now(run) for run in runs))

    def _ended(self, handing: asyncio.Future[Any]) -> None:
        """A background hand-over ended; a failure is logged (the job runner tries again)."""
        self._background.discard(handing)
        failure = None if handing.cancelled() else handing.exception()
        if isinstance(failure, RuntimeFailure):
            log.warning("run not handed over yet (%s); the job runner tries again", failure)
        elif failure is not None:
            log.error("handing a run over failed; the job runner tries again", exc_info=failure)

    async def close(self) -> None:
        """Let hand-overs in progress end (shut-down); what they miss the job runner hands over."""
        if self._background:
            await asyncio.wait(set(self._background), timeout=5.0)
