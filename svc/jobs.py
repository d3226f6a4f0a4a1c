"""Periodic service jobs: the monthly billing cycle, the run poller, mail and callback retries and
the run sweeper (runs whose actor is gone are settled; queued runs not yet taken are handed over again).

Each job is one document in `jobs`. A fire is claimed with a conditional update of
`nextRunAt` (as schedules are), so any number of schedulers run it once. The billing
job also records the cycle it is running with a lease: a scheduler that dies mid-cycle
leaves the lease to expire, and the next tick takes the same cycle over and finishes
it (the invoices make that safe: nobody is charged twice).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError

from svc.billing import Charges
from svc.core import Document, Mailer, Runtime, RuntimeFailure, Store, aware, iso, tokens, utcnow
from svc.installs import AutoUpgrades
from svc.runtime import CallbackDelivery, InstallRunner, ledger, next_fire

if TYPE_CHECKING:
    from svc.services import Services

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
INTERRUPTED = "Interrupted: the install's worker stopped during the run; start it again"

Poll = Callable[[datetime], Awaitable[int]]


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
    def for_services(cls, services: Services) -> Jobs:
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
            ),
            auto_upgrades=services.auto_upgrades,
        )

    @property
    def _jobs(self) -> AsyncCollection[Document]:
        return self.store["jobs"]

    async def tick(self, now: datetime | None = None) -> None:
        """Run what is due (each job guards its own failures)."""
        now = now or utcnow()
        if self.charges is not None and self.charges.provider is not None:
            try:
                await self._billing(now)
            except Exception:
                log.exception("billing job failed")
        if self.poll is not None:
            try:
                await self._run_poll(now)
            except Exception:
                log.exception("run poll failed")
        if self.mailer is not None:
            try:
                await self.mailer.retry_due(now)
            except Exception:
                log.exception("mail retry failed")
        if self.callbacks is not None:  # durable webhook callbacks (svc/runtime/callbacks.py)
            try:
                await self.callbacks.retry_due(now)
            except Exception:
                log.exception("callback retry failed")
        if self.sweeper is not None:
            try:
                await self._sweep(now)
            except Exception:
                log.exception("run sweep failed")
        if self.auto_upgrades is not None:  # one bounded batch per tick, resumable (docs/upgrades.md)
            try:
                await self.auto_upgrades.tick(now)
            except Exception:
                log.exception("automatic upgrades failed")

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
        token = tokens.new_id()
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
    """Nothing stays queued, starting or running forever.

    - A claimed run whose actor is gone (its incarnation is not the install's current one, or
      the current one left or stopped beating) ends failed as interrupted, with its run record,
      step event and callback (a restarted actor does the same for its own install at once).
    - A queued run handed over but not taken is handed over again with backoff (the actor's
      start is idempotent by run id), and after `handoff_seconds` ends failed with a clear message.
    """

    def __init__(
        self, store: Store, runner: InstallRunner, runtime: Runtime | None, handoff_seconds: float
    ) -> None:
        self.store = store
        self.runner = runner
        self.runtime = runtime
        self.handoff = timedelta(seconds=handoff_seconds)

    async def sweep(self, now: datetime) -> dict[str, int]:
        """One round; how many runs were settled, handed over again and expired."""
        counts = {"settled": 0, "handedOver": 0, "expired": 0}
        for run in await ledger.orphaned(self.store, now, ACTOR_GONE_AFTER):
            install = await self.store.installs.find_one({"_id": run["installId"]})
            counts["settled"] += await self.runner.settle_failed(install, run, INTERRUPTED)
        waiting = (
            await self.store[ledger.RUNS]
            .find({"status": "queued", "handoffAt": {"$ne": None, "$lte": now - timedelta(seconds=1)}})
            .sort("handoffAt", 1)
            .to_list(200)
        )
        for run in waiting:
            if aware(run["createdAt"]) <= now - self.handoff:
                message = (
                    f"The install's worker could not be started within {int(self.handoff.total_seconds())} s"
                )
                counts["expired"] += await self.runner.expire(run, message)
                continue
            attempts = int(run.get("handoffs") or 0)
            backoff = min(HANDOFF_FIRST_RETRY_S * 2**attempts, HANDOFF_MAX_BACKOFF_S)
            if aware(run["handoffAt"]) > now - timedelta(seconds=backoff):
                continue
            taken = await self.store[ledger.RUNS].update_one(
                {"_id": run["_id"], "status": "queued", "handoffAt": run["handoffAt"]},
                {"$set": {"handoffAt": now}, "$inc": {"handoffs": 1}},
            )
            if not taken.modified_count or self.runtime is None:
                continue
            try:
                await self.runtime.submit(run["installId"], {"runId": run["_id"]})
                counts["handedOver"] += 1
            except RuntimeFailure as exc:
                log.warning("queued run still not handed over (attempt %s): %s", attempts + 1, exc)
        return counts
