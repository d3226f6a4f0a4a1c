"""The warm pool (issue 38, item 7): spare install actors started ahead on each node; the first run
of an install with no actor is served by a spare that adopts it, found afterwards through the
install's incarnation record (from any API process), and the pool is topped up again. Real HTTP,
the embedded database, a real local Ray (the deployment's scheduler actor keeps the pool)."""

from __future__ import annotations

import asyncio
from typing import Any

import ray

from api.app import RUNTIME
from svc.runtime import incarnation_holder
from tests.support.runtime import member, provider_settings, start_llm, svc_install
from tests.support.waiting import wait_for


async def spares_at_least(store: Any, count: int) -> bool:
    return await store["actor_pool"].count_documents({"state": "spare"}) >= count


async def test_a_cold_install_is_served_by_a_spare_that_adopts_it(make_client, aiohttp_server, store):
    llm, url = await start_llm(aiohttp_server)
    # Both API processes publish the same configuration (a different one would retire the actors).
    settings = {"rate_limit_multiplier": None, "providers": provider_settings(url), "actor_spares": 2}
    client = await make_client(scheduler_enabled=True, **settings)
    assert await wait_for(lambda: spares_at_least(store, 2), timeout_s=90), "the keeper starts two spares"
    _, key, install_id = await svc_install(client, [member("lead")])
    llm.script(text="from a spare")
    result = await (
        await client.post(f"/api/installs/{install_id}/run", json={"task": "go"}, headers=key)
    ).json()
    assert result.get("status") == "completed" and result["response"] == "from a spare", result
    record = await incarnation_holder(store, install_id)
    assert record["actor"].startswith("spare:"), "the install's actor is the spare that adopted it"
    adopted = await store["actor_pool"].find_one({"_id": record["actor"]})
    assert (adopted["state"], adopted["install"]) == ("adopted", install_id)
    assert client.server.app[RUNTIME].actor_handle(install_id) is None, "no process was started for it"
    # A second API process (no remembered handle) reaches the same actor through the record.
    second = await make_client(scheduler_enabled=True, **settings)
    llm.script(text="again")
    again = await (
        await second.post(f"/api/installs/{install_id}/run", json={"task": "go"}, headers=key)
    ).json()
    assert again["status"] == "completed" and again["response"] == "again"
    actor = await asyncio.to_thread(ray.get_actor, record["actor"], namespace="svc")
    status = await actor.status.remote()
    assert (status["install"], status["incarnation"]) == (install_id, record["incarnation"])
    assert (await incarnation_holder(store, install_id))["incarnation"] == record["incarnation"]
    assert await wait_for(lambda: spares_at_least(store, 2), timeout_s=90), "the pool is topped up again"
