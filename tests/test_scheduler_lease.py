"""The scheduler's lifecycle: one per deployment, leased, outliving the API processes.

The schedule fixtures name no install, so every fire is recorded as a `scheduler_run`
event ("install not ready") without starting a run: the events are the fires.
"""

from __future__ import annotations

import signal
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import ray
from aiohttp.test_utils import TestClient, TestServer
from ray.exceptions import RayError

from actors.deployment import DeploymentConfig, deployment_id, publish
from actors.runtime import NAMESPACE
from actors.scheduler import SchedulerActor, scheduler_name
from api.app import STORE, VAULT, create_app
from api.context import SETTINGS
from config.settings import Settings
from svc.core.store import Store
from svc.runtime.cron import next_fire
from svc.subprocesses.embedded_db import EmbeddedMongo, uri_for
from tests.support.serve import Service
from tests.support.waiting import wait_for

SCHEDULE_ID = "every-10-seconds"
# The API takes 5-field expressions only (minutes); the scheduler computes fires with croniter,
# which reads a sixth field as seconds. Seeded straight into the store, a 10-second schedule
# shows three fires in half a minute instead of three minutes (ten times the scheduler's tick).
EVERY_10_SECONDS = "* * * * * */10"
INTERVAL = timedelta(seconds=10)
# An interval's fire, the scheduler's 1 s tick and an API start on a busy machine.
FIRE_WAIT_S = 120.0


async def every_10_seconds(store: Store, schedule_id: str = SCHEDULE_ID) -> None:
    """A schedule that fires every 10 seconds (:00, :10, :20, ...), from the next one on.

    With a catch-up window, as a schedule that must not lose a fire has: without one, a tick
    that comes late fires the due time once and moves on to the next future one (svc/runtime/
    schedules.py), so a scheduler actor that took more than 10 s to start on a loaded machine
    skipped a fire (one fresh-clone run: fires at :10, :30, :40). The test is about fires lost
    or doubled while API processes stop and start, not about how soon a tick comes."""
    await store["schedules"].insert_one(
        {
            "_id": schedule_id,
            "cronExpression": EVERY_10_SECONDS,
            "timezone": "UTC",
            "enabled": True,
            "onBacklog": "skip",
            "bypassGates": False,
            "catchupWindowSeconds": 60,
            "label": "Every 10 seconds",
            "lastRunAt": None,
            "nextRunAt": next_fire(EVERY_10_SECONDS, "UTC", datetime.now(UTC)),
        }
    )


async def fires(store: Store, schedule_id: str = SCHEDULE_ID) -> list[datetime]:
    """The due times of the schedule's fires, in order."""
    events = (
        await store["pipeline_events"]
        .find({"installId": schedule_id, "eventType": "scheduler_run"})
        .to_list(None)
    )
    return sorted(
        datetime.fromisoformat(event["meta"]["scheduledFor"].replace("Z", "+00:00")) for event in events
    )


async def wait_next_fire(store: Store) -> None:
    """Until the schedule fires once more than it has so far (a fire while things stand as they
    are now, however long the API processes took to start or stop)."""
    count = len(await fires(store)) + 1

    async def reached() -> bool:
        return len(await fires(store)) >= count

    assert await wait_for(reached, FIRE_WAIT_S), f"fewer than {count} fires: {await fires(store)}"


async def stats(actor: Any) -> dict[str, Any]:
    return await actor.stats.remote()


def named(name: str) -> Any:
    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return None


async def test_fires_once_an_interval_while_api_processes_stop_and_start(
    tmp_path, secret_key, db_uri, store, ray_session
):
    await every_10_seconds(store)
    first, second = (
        Service(tmp_path / "data", secret_key, local_ray=False, SVC_SCHEDULER="on") for _ in range(2)
    )
    for api in (first, second):
        api.env["SVC_MONGODB_URI"] = db_uri  # two API processes, one database, the session's Ray
    try:
        await first.start()
        await second.start()
        await wait_next_fire(store)

        assert await first.stop(signal.SIGTERM) == 0  # the first API to start stops cleanly
        await wait_next_fire(store)

        await first.start()
        assert await second.stop(signal.SIGTERM) == 0
        assert await first.stop(signal.SIGTERM) == 0  # no API process left at all
        await wait_next_fire(store)

        fired = await fires(store)
        assert len(fired) == len(set(fired)), f"a fire happened twice: {fired}"
        gaps = {later - earlier for earlier, later in pairwise(fired)}
        assert gaps == {INTERVAL}, f"a fire was missed: {fired}"

        name = scheduler_name(deployment_id(Settings.from_env({}, mongodb_uri=db_uri), db_uri))
        actor = named(name)
        assert actor is not None, "one scheduler, named after the deployment, outlives every API"
        lease = await store["leases"].find_one({"_id": name})
        assert lease["holder"] == (await stats(actor))["holder"], "the live copy holds the lease"
    finally:
        first.kill()
        second.kill()


async def test_two_deployments_on_one_cluster_get_two_schedulers(make_client, store, tmp_path):
    client = await make_client(scheduler_enabled=True)
    # The other deployment's database has the same name, on another server.
    other_server = EmbeddedMongo(tmp_path / "other")
    await other_server.start()
    assert other_server.port is not None
    other_uri = uri_for(other_server.port, store.db.name)
    other_settings = client.server.app[SETTINGS].model_copy(update={"mongodb_uri": other_uri})
    other = TestClient(TestServer(create_app(other_settings)))
    other_store = Store.connect(other_uri)
    names = [
        scheduler_name(deployment_id(client.server.app[SETTINGS], store.uri)),
        scheduler_name(deployment_id(other_settings, other_uri)),
    ]
    try:
        await other.start_server()
        assert names[0] != names[1]

        async def both_lead() -> bool:
            return all([await _named_leads(name) for name in names])

        assert await wait_for(both_lead), "each deployment has its own scheduler, each leading"
        holders = [(await stats(named(name)))["holder"] for name in names]
        assert (await store["leases"].find_one({"_id": names[0]}))["holder"] == holders[0]
        assert (await other_store["leases"].find_one({"_id": names[1]}))["holder"] == holders[1]

        await other.close()  # a graceful stop of that deployment's API leaves its scheduler running
        before = (await stats(named(names[1])))["ticks"]

        async def still_ticking() -> bool:
            return (await stats(named(names[1])))["ticks"] > before

        assert await wait_for(still_ticking)
    finally:
        await other.close()
        actor = named(names[1])
        if actor is not None:
            ray.kill(actor, no_restart=True)
        await other_store.close()
        await other_server.stop()


async def test_a_standby_copy_takes_over_and_a_new_configuration_is_picked_up(make_client, store):
    client = await make_client(scheduler_enabled=True)
    app = client.server.app
    deployment = deployment_id(app[SETTINGS], app[STORE].uri)

    async def leading(actor: Any) -> bool:
        return bool((await stats(actor))["leading"])

    assert await wait_for(lambda: _named_leads(scheduler_name(deployment)))
    active = named(scheduler_name(deployment))
    standby = SchedulerActor.options(namespace=NAMESPACE).remote(deployment)  # type: ignore[attr-defined]
    try:

        async def standing_by() -> bool:
            return (await stats(standby))["ticks"] >= 3

        assert await wait_for(standing_by)
        assert not await leading(standby), "one active loop per deployment"
        assert await leading(active)

        changed = app[SETTINGS].model_copy(update={"run_poll_seconds": 123.0})
        version = publish(DeploymentConfig(changed, app[STORE].uri, tuple(app[VAULT].keys)), local=True)

        async def picked_up() -> bool:
            return all([(await stats(actor))["version"] == version for actor in (active, standby)])

        assert await wait_for(picked_up), "both copies rebuild from the newer configuration"

        ray.kill(active, no_restart=True)
        assert await wait_for(lambda: leading(standby)), "the standby takes over once the lease expires"
    finally:
        ray.kill(standby, no_restart=True)


async def _named_leads(name: str) -> bool:
    actor = named(name)
    return actor is not None and bool((await stats(actor))["leading"])


async def test_a_crashed_scheduler_is_restarted_by_ray_and_leads_again(make_client, store):
    client = await make_client(scheduler_enabled=True)
    name = scheduler_name(deployment_id(client.server.app[SETTINGS], store.uri))
    assert await wait_for(lambda: _named_leads(name))
    crashed = (await stats(named(name)))["holder"]
    ray.kill(named(name), no_restart=False)  # as a crash: Ray restarts the actor

    async def restarted_and_leading() -> bool:
        try:
            now = await stats(named(name))
        except RayError:
            return False  # restarting
        return now["holder"] != crashed and now["leading"]

    assert await wait_for(restarted_and_leading), "a new incarnation takes the lease over"
