"""Schedule controls: trigger now, catch-up windows, pause on failure, jitter (docs/console.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from actors.runtime import RayRuntime
from api.app import VAULT
from api.context import SETTINGS
from svc.runtime.cron import next_fire
from svc.runtime.schedule_fires import SchedulerCore
from tests.support.runtime import member, provider_settings, start_llm, svc_install
from tests.support.waiting import wait_for


def core_for(client, store) -> SchedulerCore:
    app = client.server.app
    return SchedulerCore(store, RayRuntime(None, store.uri, app[SETTINGS], app[VAULT].keys))


async def scheduled(client, key, install_id, **fields):
    body = {"cronExpression": "0 * * * *", **fields}
    response = await client.patch(f"/api/installs/{install_id}/schedule", json=body, headers=key)
    assert response.status == 200, await response.text()
    return (await response.json())["schedule"]


async def test_trigger_runs_the_scheduled_task_now_counted_once_as_a_schedule_run(
    make_client, aiohttp_server, store
):
    llm, url = await start_llm(aiohttp_server)
    client = await make_client(rate_limit_multiplier=None, providers=provider_settings(url))
    _, key, install_id = await svc_install(client, [member("lead")])
    trigger = f"/api/installs/{install_id}/schedule/trigger"
    assert (await client.post(trigger, headers=key)).status == 404  # no schedule yet
    await scheduled(client, key, install_id, label="Nightly digest")
    llm.script(text="digest sent")
    response = await client.post(trigger, headers=key)
    assert response.status == 200, await response.text()
    body = await response.json()
    assert body["ok"] is True and body["queued"] is False and body["runId"]

    async def done() -> bool:  # ended, and its settlement (the run record among it) paid
        run = await store["pipeline_runs"].find_one({"_id": body["runId"]})
        return run is not None and run["status"] == "completed" and not run.get("owed")

    assert await wait_for(done)
    assert await store["pipeline_runs"].count_documents({"installId": install_id, "source": "schedule"}) == 1
    record = await store["runs"].find_one({"installId": install_id, "runId": body["runId"]})
    # The install's actor was cold: its recovery must not take the handed-over run for an interrupted one.
    assert record is not None and (record["source"], record["status"]) == ("schedule", "completed")
    event = await store["pipeline_events"].find_one({"installId": install_id, "eventType": "scheduler_run"})
    assert event["meta"]["manual"] is True and event["meta"]["runId"] == body["runId"]
    # The schedule's own next fire is untouched by a manual trigger.
    assert (await store["schedules"].find_one({"_id": install_id}))["lastRunAt"] is None

    await client.patch(f"/api/installs/{install_id}/schedule/toggle", json={"enabled": False}, headers=key)
    refused = await client.post(trigger, headers=key)
    assert refused.status == 409 and "disabled" in (await refused.json())["error"]


async def missed(store, install_id: str, hours_ago: float, **fields) -> None:
    """Pretend the service was down: the schedule's next fire is `hours_ago` in the past."""
    await store["schedules"].update_one(
        {"_id": install_id},
        {"$set": {"nextRunAt": datetime.now(UTC) - timedelta(hours=hours_ago), **fields}},
    )


@pytest.mark.parametrize(
    ("window_h", "on_backlog", "runs", "skipped"),
    [
        (0, "queue", 1, 0),  # no window: one fire on return (today's behaviour)
        (2, "queue", 2, 0),  # two hourly fires in a two-hour window: one starts, one queues, oldest first
        (3, "skip", 1, 2),  # skip allows no backlog: the oldest of three runs, the others are skipped
    ],
)
async def test_fires_missed_while_down_are_caught_up_within_the_window(
    make_client, store, window_h, on_backlog, runs, skipped
):
    client = await make_client(rate_limit_multiplier=None)
    _, key, install_id = await svc_install(client, [member("lead")])
    await scheduled(client, key, install_id, onBacklog=on_backlog, catchupWindowSeconds=int(window_h * 3600))
    await missed(store, install_id, hours_ago=5.5)  # five or six hourly fires were missed
    assert await core_for(client, store).tick() == 1
    created = (
        await store["pipeline_runs"].find({"installId": install_id}).sort("scheduledFor", 1).to_list(None)
    )
    assert len(created) == runs
    assert [r["scheduledFor"] for r in created] == sorted(r["scheduledFor"] for r in created)
    events = (
        await store["pipeline_events"]
        .find({"installId": install_id, "eventType": "scheduler_run"})
        .to_list(None)
    )
    assert sum(1 for e in events if e["meta"].get("skipped")) == skipped
    if window_h:
        earliest = datetime.now(UTC) - timedelta(hours=window_h, minutes=1)
        assert all(e["meta"]["caughtUp"] for e in events)
        assert all(
            datetime.fromisoformat(e["meta"]["scheduledFor"][:-1] + "+00:00") >= earliest for e in events
        )
    # Fired once: the next fire is in the future, and another tick fires nothing.
    assert await core_for(client, store).tick() == 0


async def test_consecutive_failures_pause_the_schedule_and_turning_it_on_clears_the_note(
    make_client, aiohttp_server, store
):
    llm, url = await start_llm(aiohttp_server)
    client = await make_client(rate_limit_multiplier=None, providers=provider_settings(url))
    _, key, install_id = await svc_install(client, [member("lead")])
    await scheduled(client, key, install_id, pauseOnFailure=2)
    llm.fail_next(100, status=400, message="bad request")
    for attempt in (1, 2):
        run_id = (
            await (await client.post(f"/api/installs/{install_id}/schedule/trigger", headers=key)).json()
        )["runId"]

        async def failed(run_id: str = run_id) -> bool:
            run = await store["pipeline_runs"].find_one({"_id": run_id})
            return run is not None and run["status"] == "failed"

        assert await wait_for(failed), f"scheduled run {attempt} fails"
    url_schedule = f"/api/installs/{install_id}/schedule"

    async def paused() -> bool:
        schedule = (await (await client.get(url_schedule, headers=key)).json())["schedule"]
        return schedule["enabled"] is False and bool(schedule["pausedNote"])

    assert await wait_for(paused, timeout_s=10)
    schedule = (await (await client.get(url_schedule, headers=key)).json())["schedule"]
    assert "2 failed scheduled runs in a row" in schedule["pausedNote"]
    found = {"installId": install_id, "eventType": "schedule_paused"}
    # The event follows the pause (one writer, in order): wait for it rather than race it.
    assert await wait_for(lambda: store["pipeline_events"].count_documents(found))
    event = await store["pipeline_events"].find_one(found)
    assert event["meta"]["failures"] == 2

    await client.patch(f"{url_schedule}/toggle", json={"enabled": True}, headers=key)
    schedule = (await (await client.get(url_schedule, headers=key)).json())["schedule"]
    assert schedule["enabled"] is True and schedule["pausedNote"] is None
    assert schedule["consecutiveFailures"] == 0


async def test_jitter_delays_the_next_fire_within_its_bound(make_client):
    client = await make_client(rate_limit_multiplier=None)
    _, key, install_id = await svc_install(client, [member("lead")])
    before = datetime.now(UTC)
    schedule = await scheduled(client, key, install_id, jitterSeconds=600)
    at = datetime.fromisoformat(schedule["nextRunAt"].replace("Z", "+00:00"))
    plain = next_fire("0 * * * *", "UTC", before)
    assert plain <= at <= plain + timedelta(seconds=600, milliseconds=1)
    assert schedule["jitterSeconds"] == 600 and schedule["catchupWindowSeconds"] == 0


@pytest.mark.parametrize(
    "fields",
    [{"jitterSeconds": -1}, {"jitterSeconds": 3601}, {"catchupWindowSeconds": 10**9}, {"pauseOnFailure": -2}],
)
async def test_out_of_range_controls_are_400(make_client, fields):
    client = await make_client(rate_limit_multiplier=None)
    _, key, install_id = await svc_install(client, [member("lead")])
    body = {"cronExpression": "0 * * * *", **fields}
    response = await client.patch(f"/api/installs/{install_id}/schedule", json=body, headers=key)
    assert response.status == 400 and next(iter(fields)) in (await response.json())["error"]
