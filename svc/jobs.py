"""Periodic service jobs: the monthly billing cycle, the run poller, mail and callback retries and
the run sweeper (runs whose actor is gone are handed to a new copy, stalled runs are ended, what
ended runs still owe is paid, queued runs not yet taken are handed over again) and automatic
upgrades (svc/installs/auto_upgrades.py: installs opted in move to newly published versions).

The jobs are independent: `tick` runs the due ones side by side, and the scheduler actor keeps
one task per job (`NAMES`), so a month-end charge cycle (a provider call per install) never holds
up the sweeper or the callback retries. Each job is one document in `jobs`. A fire is claimed
with a conditional update of `nextRunAt` (as schedules are), so any number of schedulers run it
once. The billing
job also records the cycle it is running with a lease: a scheduler that dies mid-cycle
leaves the lease to expire, and the next tick takes the same cycle over and finishes
it (the invoices make that safe: nobody is charged twice).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError

from svc.billing import Charges
from svc.core import Document, Mailer, Runtime, RuntimeFailure, Store, aware, iso, new_id, utcnow
from svc.installs import find_install
from svc.runtime import (
    INTERRUPTED,
    NOT_STARTED,
    OWED,
    STALLED,
    CallbackDelivery,
    HandOver,
    InstallRunner,
    next_fire,
    note_run_handoff,
    orphaned_runs,
    owing_runs,
    runtime_run,
    stalled_runs,
    waiting_runs,
)

if TYPE_CHECKING:
    from config.settings import Settings
    from svc.installs import AutoUpgrades, Installs, RunPoller

log = logging.getLogger(__name__)

BILLING = "billing-cycle"
RUN_POLL = "run-poll"
RUN_SWEEP = "run-sweep"
LEASE = timedelta(minutes=10)
SWEEP_EVERY = timedelta(seconds=2)
# An actor beats its incarnation record every 5 s; this long without a beat means it is gone.
ACTOR_GONE_AFTER = timedelta(seconds=30)
HANDOFF_FIRST_RETRY_S = 2.0
HANDOFF_MAX_BACKOFF_S = 60.0
# The actor that ended a run pays what it owes at once; the sweeper steps in after this.
OWED_GRACE = timedelta(seconds=10)
# Hand-overs and settlements one sweep makes at once.
SWEEP_CONCURRENCY = 8
SWEEP_BATCH = 200
NAMES = ("billing", "poll", "mail", "callbacks", "sweep", "upgrades")

Poll = Callable[[datetime], Awaitable[int]]


class JobServices(Protocol):
    """What the jobs need of a process's services (`svc.wiring.Services` has it all; the two
    modules sit side by side in the layers, so neither imports the other)."""

    @property
    def store(self) -> Store: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def charges(self) -> Charges: ...
    @property
    def run_poller(self) -> RunPoller: ...
    @property
    def installs(self) -> Installs: ...
    @property
    def mailer(self) -> Mailer: ...
    @property
    def callbacks(self) -> CallbackDelivery: ...
    @property
    def install_runner(self) -> InstallRunner: ...
    @property
    def runtime(self) -> Runtime | None: ...
    @property
    def auto_upgrades(self) -> AutoUpgrades: ...


class LeaseLost(Exception):
    """This scheduler's claim on a running job was taken over: it must stop."""


class Jobs:
    """Fires the periodic jobs that are due; call `tick` often (the scheduler does, each second)."""

    def __init__(
        self,
        store: Store,
        *,
        billing_cron: str,
        charges: Charges | None,
        poll: Poll | None,
        poll_seconds: float,
        mailer: Mailer | None = None,
        callbacks: CallbackDelivery | None = None,
        sweeper: RunSweeper | None = None,
        auto_upgrades: AutoUpgrades | None = None,
    ) -> None:
        self.store = store
        self.auto_upgrades = auto_upgrades  # issue 34: svc/installs/auto_upgrades.py
        self.mailer = mailer
        self.callbacks = callbacks
        self.sweeper = sweeper
        self.billing_cron = billing_cron
        self.charges = charges
        self.poll = poll
        self.poll_seconds = poll_seconds

    @classmethod
    def for_services(cls, services: JobServices) -> Jobs:
        """The jobs of a process's services (the scheduler actor builds its own)."""

        async def poll_and_sweep(now: datetime) -> int:
            """The run poll, then removing what crashed provisionings left upstream (same lease)."""
            recorded = await services.run_poller.poll_once(now)
            await services.installs.sweep_abandoned()
            return recorded

        return cls(
            services.store,
            billing_cron=services.settings.billing_cron_schedule,
            charges=services.charges,
            poll=poll_and_sweep,
            poll_seconds=services.settings.run_poll_seconds,
            mailer=services.mailer,
            callbacks=services.callbacks,
            sweeper=RunSweeper(
                services.store,
                services.install_runner,
                services.runtime,
                services.settings.run_handoff_seconds,
                services.settings.run_stall_seconds,
            ),
            auto_upgrades=services.auto_upgrades,
        )

    @property
    def _jobs(self) -> AsyncCollection[Document]:
        return self.store["jobs"]

    async def tick(self, now: datetime | None = None) -> None:
        """Run every due job, side by side (each guards its own failures)."""
        await asyncio.gather(*(self.run(name, now) for name in NAMES))

    async def run(self, name: str, now: datetime | None = None) -> None:
        """Run one job if it is due (the scheduler actor keeps a task per job name)."""
        now = now or utcnow()
        job = {
            "billing": self._billing
            if self.charges is not None and self.charges.provider is not None
            else None,
            "poll": self._run_poll if self.poll is not None else None,
            "mail": self.mailer.retry_due if self.mailer is not None else None,
            "callbacks": self.callbacks.retry_due if self.callbacks is not None else None,
            "sweep": self._sweep if self.sweeper is not None else None,
            # Issue 34: one bounded, resumable batch per fire (svc/installs/auto_upgrades.py).
            "upgrades": self.auto_upgrades.tick if self.auto_upgrades is not None else None,
        }[name]
        if job is None:
            return
        try:
            await job(now)
        except Exception:
            log.exception("%s job failed", name)

    async def _ensure(self, name: str, first_run: datetime) -> Document:
        doc = await self._jobs.find_one({"_id": name})
        if doc is not None:
            return doc
        try:
            await self._jobs.insert_one({"_id": name, "nextRunAt": first_run, "running": None})
        except DuplicateKeyError:
            pass
        doc = await self._jobs.find_one({"_id": name})
        assert doc is not None
        return doc

    # ---- billing ---------------------------------------------------------------------------

    async def _billing(self, now: datetime) -> None:
        assert self.charges is not None
        doc = await self._ensure(BILLING, next_fire(self.billing_cron, "UTC", now))
        token = new_id()
        running = doc.get("running")
        if running is not None:
            if aware(running["leaseUntil"]) > now:
                return  # another scheduler is on it
            claimed = await self._jobs.find_one_and_update(
                {"_id": BILLING, "running.token": running["token"]},
                {"$set": {"running.token": token, "running.leaseUntil": now + LEASE}},
            )
            if claimed is None:
                return
            cycle_end = aware(running["cycleEnd"])
            log.warning(
                "billing cycle taken over after an interrupted run", extra={"cycleEnd": iso(cycle_end)}
            )
        else:
            due = aware(doc["nextRunAt"])
            if due > now:
                return
            claimed = await self._jobs.find_one_and_update(
                {"_id": BILLING, "nextRunAt": doc["nextRunAt"], "running": None},
                {
                    "$set": {
                        "nextRunAt": next_fire(self.billing_cron, "UTC", now),
                        "running": {"cycleEnd": due, "token": token, "leaseUntil": now + LEASE},
                    }
                },
            )
            if claimed is None:
                return
            cycle_end = due

        async def renew() -> None:
            renewed = await self._jobs.update_one(
                {"_id": BILLING, "running.token": token},
                {"$set": {"running.leaseUntil": max(now, utcnow()) + LEASE}},
            )
            if renewed.matched_count == 0:
                raise LeaseLost("another scheduler took the billing cycle over")

        counts = await self.charges.run_cycle(cycle_end, now, renew)
        counts["heldPaidOut"] = await self.charges.pay_out_held()
        await self._jobs.update_one(
            {"_id": BILLING, "running.token": token},
            {"$set": {"running": None, "lastCycleEnd": cycle_end, "lastCounts": counts}},
        )

    # ---- polling -------------------------------------------------------------------------------

    async def _run_poll(self, now: datetime) -> None:
        assert self.poll is not None
        doc = await self._ensure(RUN_POLL, now)
        if aware(doc["nextRunAt"]) > now:
            return
        claimed = await self._jobs.find_one_and_update(
            {"_id": RUN_POLL, "nextRunAt": doc["nextRunAt"]},
            {"$set": {"nextRunAt": now + timedelta(seconds=self.poll_seconds)}},
        )
        if claimed is not None:
            await self.poll(now)

    # ---- the run sweeper ----------------------------------------------------------------------

    async def _sweep(self, now: datetime) -> None:
        """One sweeper per cluster: the fire is claimed like the run poll's, every SWEEP_EVERY."""
        assert self.sweeper is not None
        doc = await self._ensure(RUN_SWEEP, now)
        if aware(doc["nextRunAt"]) > now:
            return
        claimed = await self._jobs.find_one_and_update(
            {"_id": RUN_SWEEP, "nextRunAt": doc["nextRunAt"]}, {"$set": {"nextRunAt": now + SWEEP_EVERY}}
        )
        if claimed is not None:
            await self.sweeper.sweep(now)


class RunSweeper:
    """Nothing stays queued, running or owing forever.

    - A claimed run whose actor is gone (its incarnation is not the install's current one, or
      the current one left or stopped beating) is handed to a new copy of its install's actor,
      whose recovery resumes it from its journal (Ray restarts a crashed actor at once; this
      covers a node that left); oldest first.
    - A running run with no step for `stall_seconds` ends failed, whatever its actor.
    - A run that ended (or paused) and still owes side effects after OWED_GRACE has them paid.
    - A queued run handed over but not taken is handed over again with backoff (the actor's
      start is idempotent by run id), and after `handoff_seconds` ends failed with a clear message.
    Hand-overs and settlements run SWEEP_CONCURRENCY at a time.
    """

    def __init__(
        self,
        store: Store,
        runner: InstallRunner,
        runtime: Runtime | None,
        handoff_seconds: float,
        stall_seconds: float = 900.0,
    ) -> None:
        self.store = store
        self.runner = runner
        self.runtime = runtime
        self.handover = HandOver(store, runtime)
        self.handoff = timedelta(seconds=handoff_seconds)
        self.stall = timedelta(seconds=stall_seconds)
        self._bound = asyncio.Semaphore(SWEEP_CONCURRENCY)

    async def sweep(self, now: datetime) -> dict[str, int]:
        """One round; how many runs were woken, settled, paid, handed over again and expired."""
        counts = {"woken": 0, "settled": 0, "paid": 0, "handedOver": 0, "expired": 0}
        orphans = await orphaned_runs(self.store, now, ACTOR_GONE_AFTER, SWEEP_BATCH)
        stalled = await stalled_runs(self.store, now - self.stall, SWEEP_BATCH)
        owing = await owing_runs(self.store, OWED, now - OWED_GRACE, SWEEP_BATCH)
        waiting = await waiting_runs(self.store, now - timedelta(seconds=1), SWEEP_BATCH)
        stalled_ids = {run["_id"] for run in stalled}
        await asyncio.gather(
            *(self._bounded(self._wake(run, counts)) for run in orphans if run["_id"] not in stalled_ids),
            *(self._bounded(self._settle(run, STALLED, counts)) for run in stalled),
            *(self._bounded(self._pay(run, counts)) for run in owing),
            *(self._bounded(self._hand_over(run, now, counts)) for run in waiting),
        )
        return counts

    async def _bounded(self, job: Any) -> None:
        async with self._bound:
            try:
                await job
            except Exception as exc:  # one run's trouble must not stop the others
                log.warning("sweep step failed: %s", type(exc).__name__)

    async def _wake(self, run: Document, counts: dict[str, int]) -> None:
        """Have a live copy of the run's install actor (its recovery resumes the run); a run of a
        vanished install, or with no runtime at all, ends failed."""
        install = await find_install(self.store, run["installId"], "_id")
        if install is None or self.runtime is None:
            await self._settle(run, INTERRUPTED, counts)
            return
        try:
            await self.runtime.wake(run["installId"])
            counts["woken"] += 1
        except RuntimeFailure as exc:
            log.warning("orphaned run's install actor not started yet: %s", exc)

    async def _settle(self, run: Document, message: str, counts: dict[str, int]) -> None:
        full = await runtime_run(self.store, run["_id"], heavy=True)
        if full is not None:
            counts["settled"] += await self.runner.settle_gone(full, message)

    async def _pay(self, run: Document, counts: dict[str, int]) -> None:
        counts["paid"] += await self.runner.settlement.finish(run["_id"])

    async def _hand_over(self, run: Document, now: datetime, counts: dict[str, int]) -> None:
        if aware(run["createdAt"]) <= now - self.handoff:
            message = f"{NOT_STARTED} within {int(self.handoff.total_seconds())} s"
            counts["expired"] += await self.runner.stop(run["_id"], message)
            return
        attempts = int(run.get("handoffs") or 0)
        backoff = min(HANDOFF_FIRST_RETRY_S * 2**attempts, HANDOFF_MAX_BACKOFF_S)
        if aware(run["handoffAt"]) > now - timedelta(seconds=backoff):
            return
        if await note_run_handoff(self.store, run, now) and await self.handover.now(run):
            counts["handedOver"] += 1
