"""The monthly billing job: charges every active paid install once per cycle, even across a crash.

The job's tick is driven directly with explicit times (the scheduler actor calls the same
`Jobs.tick` every second), against the app's store and the fake payment provider. The usage comes
from orchA installs reporting their runs through the install token, as Paperclip's reporter does
(billing is the same on every platform; `svc` installs take no reports).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine

from api.context import SERVICES
from svc.jobs import BILLING, LEASE, Jobs
from tests.support.accounts import app_store, bearer
from tests.support.billing import (
    APP_KEY,
    Deal,
    paid_install,
    payment_settings,
    report,
    start_fake_stripe,
)
from tests.support.runs import start_paperclip
from tests.support.waiting import eventually


def first_of_next_month(moment: datetime) -> datetime:
    return (moment.replace(day=28) + timedelta(days=4)).replace(
        day=1, hour=0, minute=0, second=0, microsecond=0
    )


# Each test runs on a clock moved to the middle of a month (time-machine, ticking), so the cycle
# that bills its runs ends on the next 1st whatever the wall clock says: a suite that runs
# across midnight at a month's end gets the same cycle as any other.
NOW = first_of_next_month(datetime.now(UTC)).replace(day=15, hour=12)
CYCLE_END = first_of_next_month(NOW)


@pytest.fixture(autouse=True)
def mid_month() -> Iterator[None]:
    with time_machine.travel(NOW, tick=True):
        yield


def jobs_of(client: Any, cron: str = "0 0 1 * *") -> Jobs:
    services = client.server.app[SERVICES]
    return Jobs(services.store, billing_cron=cron, charges=services.charges, poll=None, poll_seconds=300)


async def deals_with_usage(client: Any, fake: Any, paperclip: Any, count: int) -> list[Deal]:
    """`count` orchA installs of one per-run template at $1, with a saved card and one run each."""
    on_orch_a: dict[str, Any] = {"platform": "orchA", "upstream": paperclip}
    first = await paid_install(client, fake, model="per_run", price=100, **on_orch_a)
    deals = [first]
    for _ in range(count - 1):
        deals.append(
            await paid_install(
                client, fake, builder=(first.builder, first.builder_key), template=first.template, **on_orch_a
            )
        )
    for deal in deals:
        await report(client, deal)
    return deals


async def arm(jobs: Jobs) -> None:
    """The job's first tick schedules the next 1st of the month; make that the test's cycle end."""
    await jobs.tick(datetime.now(UTC))
    doc = await jobs.store["jobs"].find_one({"_id": BILLING})
    assert doc["nextRunAt"] == CYCLE_END


async def test_monthly_cycle_charges_each_paid_install_once(make_client: Any, aiohttp_server: Any) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    paperclip = await start_paperclip(aiohttp_server)
    deals = await deals_with_usage(client, fake, paperclip, 3)
    on_orch_a: dict[str, Any] = {"platform": "orchA", "upstream": paperclip}
    unpaid = await paid_install(client, fake, card=None, **on_orch_a)  # no saved payment method: left alone
    await report(client, unpaid)
    free = await paid_install(client, fake, model="free", price=None, **on_orch_a)
    await report(client, free)
    jobs = jobs_of(client)
    await arm(jobs)
    await jobs.tick(CYCLE_END - timedelta(seconds=1))
    assert fake.succeeded_charges() == []  # not due yet
    await jobs.tick(CYCLE_END + timedelta(seconds=5))
    charged = sorted(pi["metadata"]["installId"] for pi in fake.succeeded_charges())
    assert charged == sorted(deal.install_id for deal in deals)
    assert all(pi["amount"] == 100 for pi in fake.succeeded_charges())
    # The next tick, and a racing second scheduler, find nothing due.
    await asyncio.gather(jobs.tick(CYCLE_END + timedelta(minutes=1)), jobs_of(client).tick(CYCLE_END))
    assert len(fake.succeeded_charges()) == 3
    doc = await app_store(client)["jobs"].find_one({"_id": BILLING})
    assert doc["running"] is None
    assert doc["nextRunAt"] == first_of_next_month(CYCLE_END)
    assert doc["lastCounts"]["charged"] == 3


async def test_racing_schedulers_run_the_cycle_once(make_client: Any, aiohttp_server: Any) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    paperclip = await start_paperclip(aiohttp_server)
    await deals_with_usage(client, fake, paperclip, 2)
    first, second = jobs_of(client), jobs_of(client)
    await arm(first)
    due = CYCLE_END + timedelta(seconds=1)
    await asyncio.gather(first.tick(due), second.tick(due))
    assert len(fake.succeeded_charges()) == 2
    assert fake.charge_attempts == 2


async def test_a_crash_mid_cycle_is_resumed_without_charging_twice(
    make_client: Any, aiohttp_server: Any
) -> None:
    fake = await start_fake_stripe(aiohttp_server, hang_on_charge=2)
    client = await make_client(**payment_settings(fake))
    paperclip = await start_paperclip(aiohttp_server)
    deals = await deals_with_usage(client, fake, paperclip, 3)
    jobs = jobs_of(client)
    await arm(jobs)
    started = CYCLE_END + timedelta(seconds=30)
    cycle = asyncio.create_task(jobs.tick(started))
    # The provider takes the second charge and never answers: the scheduler dies waiting.
    await eventually(lambda: len(fake.payment_intents) == 2, "the second charge to reach the provider")
    cycle.cancel()
    await asyncio.gather(cycle, return_exceptions=True)
    invoices = app_store(client)["invoices"]
    statuses = sorted([doc["status"] async for doc in invoices.find({})])
    assert statuses == ["paid", "processing"]
    fake.hang_on_charge = None
    # Within the lease another scheduler leaves the cycle alone.
    await jobs_of(client).tick(started + timedelta(minutes=1))
    assert await invoices.count_documents({}) == 2
    # After it, the cycle is taken over and finished: the second charge is recovered, not repeated.
    await jobs_of(client).tick(started + LEASE + timedelta(seconds=1))
    assert len(fake.payment_intents) == 3
    charged = sorted(pi["metadata"]["installId"] for pi in fake.succeeded_charges())
    assert charged == sorted(deal.install_id for deal in deals)
    assert [doc["status"] async for doc in invoices.find({})] == ["paid"] * 3
    assert [doc["attempt"] async for doc in invoices.find({})] == [1, 1, 1]  # same key: a replay
    doc = await app_store(client)["jobs"].find_one({"_id": BILLING})
    assert doc["running"] is None and doc["lastCycleEnd"] == CYCLE_END
    # A rerun of the same cycle charges nobody.
    await app_store(client)["jobs"].update_one({"_id": BILLING}, {"$set": {"nextRunAt": CYCLE_END}})
    await jobs_of(client).tick(started + LEASE + timedelta(minutes=2))
    assert len(fake.payment_intents) == 3


async def test_small_amounts_carry_over_to_the_next_cycle(make_client: Any, aiohttp_server: Any) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    paperclip = await start_paperclip(aiohttp_server)
    deal = await paid_install(client, fake, model="per_run", price=30, platform="orchA", upstream=paperclip)
    await report(client, deal)  # 30 cents: under the 50-cent minimum
    jobs = jobs_of(client)
    await arm(jobs)
    await jobs.tick(CYCLE_END + timedelta(seconds=1))
    assert fake.succeeded_charges() == []
    await report(client, deal)  # another 30 cents, still before the next cycle end
    await app_store(client)["jobs"].update_one({"_id": BILLING}, {"$set": {"nextRunAt": CYCLE_END}})
    await jobs.tick(CYCLE_END + timedelta(seconds=2))
    [intent] = fake.succeeded_charges()
    assert intent["amount"] == 60


async def test_the_cron_comes_from_billing_cron_schedule(make_client: Any, aiohttp_server: Any) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake, billing_cron_schedule="30 6 * * 1"))
    services = client.server.app[SERVICES]
    jobs = Jobs.for_services(services)
    monday_morning = datetime(2026, 11, 23, 6, 30, tzinfo=UTC)
    await jobs.tick(datetime(2026, 11, 22, 12, 0, tzinfo=UTC))
    doc = await app_store(client)["jobs"].find_one({"_id": BILLING})
    assert doc["nextRunAt"] == monday_morning


async def test_an_install_deleted_without_cancel_billing_still_pays_its_usage(
    make_client: Any, aiohttp_server: Any
) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    paperclip = await start_paperclip(aiohttp_server)
    [deal] = await deals_with_usage(client, fake, paperclip, 1)
    response = await client.delete(f"/api/installs/{deal.install_id}", headers=bearer(deal.deployer_key))
    assert response.status == 200
    jobs = jobs_of(client)
    await arm(jobs)
    await jobs.tick(CYCLE_END + timedelta(seconds=1))
    [intent] = fake.succeeded_charges()
    assert intent["metadata"]["installId"] == deal.install_id and intent["amount"] == 100
    await app_store(client)["jobs"].update_one({"_id": BILLING}, {"$set": {"nextRunAt": CYCLE_END}})
    await jobs.tick(CYCLE_END + timedelta(seconds=2))
    assert len(fake.succeeded_charges()) == 1  # billed up to the deletion, once


async def test_the_monthly_job_does_not_rebill_what_charge_cycle_billed(
    make_client: Any, aiohttp_server: Any
) -> None:
    fake = await start_fake_stripe(aiohttp_server)
    client = await make_client(**payment_settings(fake))
    paperclip = await start_paperclip(aiohttp_server)
    [deal] = await deals_with_usage(client, fake, paperclip, 1)
    now = datetime.now(UTC)
    period = {"installId": deal.install_id, "amountCents": 100, "periodStart": "2020-01-01T00:00:00Z"}
    response = await client.post(
        "/api/stripe/charge-cycle", json={**period, "periodEnd": now.isoformat()}, headers=bearer(APP_KEY)
    )
    assert response.status == 200, await response.text()
    jobs = jobs_of(client)
    await arm(jobs)
    await jobs.tick(CYCLE_END + timedelta(seconds=1))
    assert len(fake.succeeded_charges()) == 1
