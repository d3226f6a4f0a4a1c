"""Cron schedules: the API, DST, and the scheduler firing each due fire exactly once."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from actors.runtime import RayRuntime
from api.app import VAULT
from api.context import SETTINGS
from svc.core import Store
from svc.runtime.cron import next_fire
from svc.runtime.schedule_fires import RETRY_FIRE_AFTER_S, SchedulerCore
from tests.support import faults
from tests.support.runtime import member, provider_settings, start_llm, svc_install
from tests.support.waiting import wait_for


async def test_schedule_api(make_client):
    client = await make_client(rate_limit_multiplier=None)
    caller, key, install_id = await svc_install(client, [member("lead")])
    url = f"/api/installs/{install_id}/schedule"
    body = await (await client.get(url, headers=key)).json()
    assert body["schedule"] is None and "Europe/Berlin" in body["timezones"]
    response = await client.patch(
        url,
        json={
            "cronExpression": "*/5 * * * *",
            "label": "Every five",
            "timezone": "Europe/Berlin",
            "onBacklog": "queue",
        },
        headers=key,
    )
    assert response.status == 200, await response.text()
    schedule = (await response.json())["schedule"]
    assert schedule["enabled"] is True and schedule["bypassGates"] is False
    assert schedule["onBacklog"] == "queue" and schedule["lastRunAt"] is None
    next_at = datetime.fromisoformat(schedule["nextRunAt"].replace("Z", "+00:00"))
    assert timedelta(0) < next_at - datetime.now(UTC) <= timedelta(minutes=5)
    mine = await (await client.get("/api/installs/mine", headers=caller.cookie)).json()
    assert mine[0]["nextRunAt"] == schedule["nextRunAt"]
    # Only the fields sent change.
    again = await (
        await client.patch(url, json={"cronExpression": "0 9 * * 1"}, headers=caller.cookie)
    ).json()
    assert again["schedule"]["label"] == "Every five" and again["schedule"]["timezone"] == "Europe/Berlin"
    toggled = await (await client.patch(f"{url}/toggle", json={"enabled": False}, headers=key)).json()
    assert toggled == {"ok": True, "enabled": False}
    assert (await (await client.get(url, headers=key)).json())["schedule"]["nextRunAt"] is None
    deleted = await (await client.patch(url, json={"cronExpression": None}, headers=key)).json()
    assert deleted == {"ok": True, "schedule": None}
    assert (await client.patch(f"{url}/toggle", json={"enabled": True}, headers=key)).status == 404


@pytest.mark.parametrize(
    ("body", "word"),
    [
        ({"cronExpression": "0 0 * * * *"}, "5 fields"),
        ({"cronExpression": "61 * * * *"}, "cronExpression"),
        ({"cronExpression": "every day"}, "cronExpression"),
        ({"cronExpression": "* * * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"cronExpression": "* * * * *", "onBacklog": "later"}, "onBacklog"),
        ({}, "cronExpression"),
        ({"cronExpression": "0 0 30 2 *"}, "cronExpression"),
        ({"cronExpression": "* * * * *", "timezone": "America"}, "timezone"),
    ],
)
async def test_bad_schedules_are_400(make_client, body, word):
    client = await make_client(rate_limit_multiplier=None)
    _, key, install_id = await svc_install(client, [member("lead")])
    response = await client.patch(f"/api/installs/{install_id}/schedule", json=body, headers=key)
    assert response.status == 400 and word in (await response.json())["error"]


def test_daylight_saving_in_berlin():
    zone = "Europe/Berlin"
    # Spring forward (29 March 2026): 02:30 does not exist; the fire comes at 03:00 CEST.
    spring = next_fire("30 2 * * *", zone, datetime(2026, 3, 28, 2, 0, tzinfo=UTC))
    assert spring == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    # Fall back (25 October 2026): 02:30 happens twice; it fires once.
    first = next_fire("30 2 * * *", zone, datetime(2026, 10, 24, 2, 0, tzinfo=UTC))
    assert first == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    assert next_fire("30 2 * * *", zone, first) == datetime(2026, 10, 26, 1, 30, tzinfo=UTC)


async def make_due(store, install_id, minutes_ago=1, **fields):
    await store["schedules"].update_one(
        {"_id": install_id},
        {
            "$set": {
                "cronExpression": "0 * * * *",
                "timezone": "UTC",
                "enabled": True,
                "onBacklog": "skip",
                "bypassGates": False,
                "label": "Hourly",
                "lastRunAt": None,
                "nextRunAt": datetime.now(UTC) - timedelta(minutes=minutes_ago),
                **fields,
            }
        },
        upsert=True,
    )


def core_for(client, store):
    """A scheduler on the test's database with the real Ray runtime (as the actor builds it)."""
    app = client.server.app
    return SchedulerCore(store, RayRuntime(None, store.uri, app[SETTINGS], app[VAULT].keys))


async def test_the_scheduler_actor_fires_a_due_schedule(make_client, aiohttp_server, store):
    llm, url = await start_llm(aiohttp_server)
    client = await make_client(
        rate_limit_multiplier=None, providers=provider_settings(url), scheduler_enabled=True
    )
    _, key, install_id = await svc_install(client, [member("lead")])
    llm.script(text="scheduled work done")
    await make_due(store, install_id)

    async def completed() -> bool:  # ended, and its settlement (the schedule's outcome among it) paid
        run = await store["pipeline_runs"].find_one({"installId": install_id, "source": "schedule"})
        return run is not None and run["status"] == "completed" and not run.get("owed")

    assert await wait_for(completed)
    events = (await (await client.get(f"/api/installs/{install_id}/events", headers=key)).json())["events"]
    assert "scheduler_run" in [e["eventType"] for e in events]
    schedule = await store["schedules"].find_one({"_id": install_id})
    assert schedule["nextRunAt"] > datetime.now(UTC) and schedule["lastRunAt"] is not None


async def test_two_schedulers_racing_fire_once_and_missed_fires_do_not_storm(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    _, _, install_id = await svc_install(client, [member("lead")])
    await make_due(store, install_id, minutes_ago=180)  # three hourly fires were missed
    first, second = core_for(client, store), core_for(client, store)
    fired = await asyncio.gather(first.tick(), second.tick(), first.tick())
    assert sum(fired) == 1
    assert await store["pipeline_runs"].count_documents({"installId": install_id, "source": "schedule"}) == 1
    assert (await store["schedules"].find_one({"_id": install_id}))["nextRunAt"] > datetime.now(UTC)


# The schedule of the cut-fire tests: its next fire never comes due in a test that looks ahead
# RETRY_FIRE_AFTER_S (an hourly one would, within that long of the hour).
YEARLY = "0 0 1 1 *"


async def fired_records(store, install_id):
    """The scheduled runs and `scheduler_run` events of an install."""
    runs = await store["pipeline_runs"].find({"installId": install_id, "source": "schedule"}).to_list(None)
    events = store["pipeline_events"].find({"installId": install_id, "eventType": "scheduler_run"})
    return runs, await events.to_list(None)


async def cut_fire(make_client, store, due_at):
    """An install whose fire due at `due_at` a tick claimed, then failed to write (the database
    away); its scheduler, on a client of its own (which the failpoint aims at) that hands
    nothing over (the runs stay queued). (install id, the scheduler, its store)"""
    client = await make_client(rate_limit_multiplier=None)
    _, _, install_id = await svc_install(client, [member("lead")])
    await make_due(store, install_id, nextRunAt=due_at, cronExpression=YEARLY)
    scheduler_store = Store.connect(store.uri, appname="svc-scheduler-test")
    core = SchedulerCore(scheduler_store, None)
    await faults.fail(store, ["bulkWrite"], app="svc-scheduler-test")
    with pytest.raises(Exception):  # noqa: B017 - whatever the driver raises for the failed command
        await core.tick()
    return install_id, core, scheduler_store


async def test_a_fire_cut_between_its_claim_and_its_records_is_fired_again_once(make_client, store):
    due_at = (datetime.now(UTC) - timedelta(minutes=1)).replace(microsecond=0)
    install_id, core, scheduler_store = await cut_fire(make_client, store, due_at)
    schedule = await store["schedules"].find_one({"_id": install_id})
    assert schedule["nextRunAt"] > datetime.now(UTC), "the fire was claimed"
    assert await fired_records(store, install_id) == ([], [])

    now = datetime.now(UTC)
    assert await core.tick(now) == 0
    assert await fired_records(store, install_id) == ([], []), "a tick still writing it is not overtaken"

    later = now + timedelta(seconds=RETRY_FIRE_AFTER_S + 1)
    await asyncio.gather(core.tick(later), SchedulerCore(store, None).tick(later))
    runs, events = await fired_records(store, install_id)
    assert [run["scheduledFor"] for run in runs] == [due_at], "fired again once, for the time it was due"
    assert [event["meta"]["runId"] for event in events] == [runs[0]["_id"]]
    assert (await store["schedules"].find_one({"_id": install_id}))["firing"] == []
    await scheduler_store.close()


async def test_a_fire_cut_after_its_run_landed_is_not_fired_twice(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    _, _, install_id = await svc_install(client, [member("lead")])
    await make_due(store, install_id, onBacklog="skip", cronExpression=YEARLY)
    core = SchedulerCore(store, None)
    assert await core.tick() == 1
    (run,), (event,) = await fired_records(store, install_id)
    # As if the tick stopped after its run was stored (the batch is ordered, not atomic), before
    # its event and the clearing of its note.
    await store["pipeline_events"].delete_one({"_id": event["_id"]})
    claimed_at = run["createdAt"]
    note = {"token": "cut", "fires": [run["scheduledFor"]], "since": claimed_at, "attempts": 1}
    await store["schedules"].update_one({"_id": install_id}, {"$set": {"firing": [note]}})
    # Its own queued run makes the install busy, and a skip schedule skips when busy: the fire
    # sent again must find that run by its id, not skip the fire or start a second run.
    await core.tick(datetime.now(UTC) + timedelta(seconds=RETRY_FIRE_AFTER_S + 1))
    runs, events = await fired_records(store, install_id)
    assert [r["_id"] for r in runs] == [run["_id"]] and [e["_id"] for e in events] == [event["_id"]]
    assert events[0]["meta"] == event["meta"] == {
        "scheduledFor": event["meta"]["scheduledFor"],
        "runId": run["_id"],
        "queued": False,
    }
    assert (await store["schedules"].find_one({"_id": install_id}))["firing"] == []


async def test_a_cut_fire_whose_event_landed_keeps_its_decision_and_a_switched_off_one_is_dropped(
    make_client, store
):
    client = await make_client(rate_limit_multiplier=None)
    _, _, install_id = await svc_install(client, [member("lead")])
    await store["pipeline_runs"].insert_one({"_id": "active", "installId": install_id, "status": "running"})
    await make_due(store, install_id, onBacklog="skip", cronExpression=YEARLY)
    core = SchedulerCore(store, None)
    assert await core.tick() == 1
    runs, (event,) = await fired_records(store, install_id)
    assert runs == [] and event["meta"]["skipped"] is True
    # As if the tick stopped after its event was stored, before its note was taken out; the
    # install is free by the time the fire is sent again.
    fire_at = datetime.fromisoformat(event["meta"]["scheduledFor"])
    note = {"token": "cut", "fires": [fire_at], "since": event["createdAt"], "attempts": 1}
    await store["schedules"].update_one({"_id": install_id}, {"$set": {"firing": [note]}})
    await store["pipeline_runs"].update_one({"_id": "active"}, {"$set": {"status": "completed"}})
    later = datetime.now(UTC) + timedelta(seconds=RETRY_FIRE_AFTER_S + 1)
    await core.tick(later)
    assert await fired_records(store, install_id) == ([], [event]), "the fire stays skipped, as recorded"
    assert (await store["schedules"].find_one({"_id": install_id}))["firing"] == []

    # A schedule switched off after a cut fire drops it instead of running it.
    await store["schedules"].update_one({"_id": install_id}, {"$set": {"firing": [note], "enabled": False}})
    await core.tick(later + timedelta(seconds=RETRY_FIRE_AFTER_S + 1))
    assert await fired_records(store, install_id) == ([], [event])
    assert (await store["schedules"].find_one({"_id": install_id}))["firing"] == []


async def test_a_cut_fire_is_fired_again_after_the_next_fire_was_claimed(make_client, store):
    first_due = (datetime.now(UTC) - timedelta(minutes=2)).replace(microsecond=0)
    install_id, core, scheduler_store = await cut_fire(make_client, store, first_due)

    # The schedule's next fire comes due and is fired whole before the cut one is retried.
    second_due = first_due + timedelta(minutes=1)
    await store["schedules"].update_one({"_id": install_id}, {"$set": {"nextRunAt": second_due}})
    assert await core.tick() == 1
    (second,), _ = await fired_records(store, install_id)
    await store["pipeline_runs"].update_one({"_id": second["_id"]}, {"$set": {"status": "completed"}})

    await core.tick(datetime.now(UTC) + timedelta(seconds=RETRY_FIRE_AFTER_S + 1))
    runs, events = await fired_records(store, install_id)
    assert sorted(run["scheduledFor"] for run in runs) == [first_due, second_due]
    assert sorted(event["meta"]["runId"] for event in events) == sorted(run["_id"] for run in runs)
    assert (await store["schedules"].find_one({"_id": install_id}))["firing"] == []
    await scheduler_store.close()


async def test_backlog_skip_and_queue(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    _, _, install_id = await svc_install(client, [member("lead")])
    core = core_for(client, store)
    await store["pipeline_runs"].insert_one({"_id": "active", "installId": install_id, "status": "running"})

    await make_due(store, install_id, onBacklog="skip")
    assert await core.tick() == 1
    lag = await store["metric_counters"].find_one({"name": "scheduler_lag_seconds"})
    assert lag["count"] == 1 and lag["sum"] >= 0, "the fire's delay is counted for /metrics"
    assert lag["sum"] >= 60, "from its due time, a minute ago"
    assert await store["pipeline_runs"].count_documents({"source": "schedule"}) == 0
    event = await store["pipeline_events"].find_one({"installId": install_id, "eventType": "scheduler_run"})
    assert event["meta"]["skipped"] is True

    await make_due(store, install_id, onBacklog="queue")
    await core.tick()
    await make_due(store, install_id, onBacklog="queue")
    await core.tick()
    queued = await store["pipeline_runs"].find({"source": "schedule"}).to_list(None)
    assert [r["status"] for r in queued] == ["queued"], "at most one queued run"

    await store["pipeline_runs"].update_one({"_id": "active"}, {"$set": {"status": "completed"}})
    await core.tick()

    async def started() -> bool:
        run = await store["pipeline_runs"].find_one({"_id": queued[0]["_id"]})
        return run["status"] not in ("queued", "starting")

    assert await wait_for(started), "the queued run starts once the install is free"
