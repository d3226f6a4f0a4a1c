"""Durable callbacks: stored before the first attempt, retried by the job runner with backoff until
delivered (time moved through the jobs' clock, not waited for), delivered by a new app instance
after a restart, attempts visible, redeliver on demand, signed as before."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from aiohttp import web

from api.context import SERVICES
from svc.core import aware, utcnow
from svc.jobs import Jobs
from svc.runtime.callbacks import sign
from tests.support.accounts import signup
from tests.support.runtime import member, provider_settings, start_llm, svc_install
from tests.support.waiting import wait_for


class Receiver:
    """A callback receiver that answers `failures` times with 503, then 204."""

    def __init__(self, failures: int, final_status: int = 204) -> None:
        self.failures = failures
        self.final_status = final_status
        self.received: list[tuple[int, bytes, str | None]] = []

    def app(self) -> web.Application:
        async def hook(request: web.Request) -> web.Response:
            body = await request.read()
            status = 503 if len(self.received) < self.failures else self.final_status
            self.received.append((status, body, request.headers.get("Svc-Signature")))
            return web.Response(status=status)

        app = web.Application()
        app.router.add_post("/hook", hook)
        return app


def jobs_of(client: Any) -> Jobs:
    """The job runner of an app's services, callbacks only (as the scheduler ticks it)."""
    services = client.server.app[SERVICES]
    return Jobs(
        services.store,
        billing_cron="0 0 1 * *",
        charges=None,
        poll=None,
        poll_seconds=300,
        callbacks=services.callbacks,
    )


async def setup(make_client: Any, aiohttp_server: Any, receiver: Receiver, **settings: Any) -> dict[str, Any]:
    llm, url = await start_llm(aiohttp_server)
    client = await make_client(rate_limit_multiplier=None, providers=provider_settings(url), **settings)
    server = await aiohttp_server(receiver.app())
    caller, key, install_id = await svc_install(client, [member("lead")])
    mine = await (await client.get("/api/installs/mine", headers=caller.cookie)).json()
    return {
        "client": client,
        "llm": llm,
        "url": url,
        "caller": caller,
        "key": key,
        "install_id": install_id,
        "token": mine[0]["webhookToken"],
        "hook": str(server.make_url("/hook")),
    }


async def trigger(env: dict[str, Any]) -> str:
    env["llm"].script(text="done", input_tokens=3, output_tokens=4)
    answer = await env["client"].post(
        f"/api/webhook/{env['token']}", json={"inputText": "go", "callbackUrl": env["hook"]}
    )
    assert answer.status == 200, await answer.text()
    return str((await answer.json())["runId"])


async def record_after(store: Any, run_id: str, attempts: int) -> dict[str, Any]:
    """The delivery record once it holds `attempts` attempts and no attempt is in flight."""
    found: dict[str, Any] = {}

    async def ready() -> bool:
        doc = await store["callbacks"].find_one({"_id": run_id})
        if doc is not None and len(doc["attempts"]) >= attempts and doc.get("leasedUntil") is None:
            found.update(doc)
            return True
        return False

    assert await wait_for(ready), f"the callback never had {attempts} attempts"
    return found


async def test_a_callback_is_retried_until_delivered_once_even_across_a_restart(
    make_client, aiohttp_server, store
):
    receiver = Receiver(failures=2)
    env = await setup(make_client, aiohttp_server, receiver)
    client = env["client"]
    secret = await (
        await client.post(f"/api/installs/{env['install_id']}/callback-secret", headers=env["caller"].cookie)
    ).json()
    run_id = await trigger(env)

    # The first attempt (in the install's actor) failed: the callback is stored, pending, with a retry time.
    doc = await record_after(store, run_id, 1)
    assert doc["status"] == "pending" and doc["installId"] == env["install_id"] and doc["url"] == env["hook"]
    first = doc["attempts"][0]
    assert first["status"] == 503 and first["error"] == "HTTP 503" and first["latencyMs"] >= 0
    due = aware(doc["nextAttemptAt"])
    wait = due - aware(first["at"])
    assert timedelta(seconds=8) <= wait <= timedelta(seconds=12)  # 10 s, jitter ±20%

    # Not due yet: the job runner sends nothing.
    jobs = jobs_of(client)
    await jobs.tick(due - timedelta(seconds=1))
    assert len(receiver.received) == 1

    # Due: the second attempt fails too, and waits about twice as long.
    await jobs.tick(due + timedelta(seconds=1))
    doc = await record_after(store, run_id, 2)
    assert len(receiver.received) == 2 and doc["status"] == "pending"
    second_due = aware(doc["nextAttemptAt"])
    assert timedelta(seconds=16) <= second_due - (due + timedelta(seconds=1)) <= timedelta(seconds=24)

    # The API process goes away; a new app instance on the same database delivers the callback.
    await client.close()
    restarted = await make_client(rate_limit_multiplier=None, providers=provider_settings(env["url"]))
    await jobs_of(restarted).tick(second_due + timedelta(seconds=1))
    doc = await record_after(store, run_id, 3)
    assert doc["status"] == "delivered"
    assert [a["status"] for a in doc["attempts"]] == [503, 503, 204]
    delivered = [r for r in receiver.received if r[0] == 204]
    assert len(delivered) == 1, "delivered exactly once"
    _status, raw, signature = delivered[0]
    assert signature is not None
    stamp = int(signature.split(",")[0][2:])
    assert signature == sign(raw, secret["callbackSecret"], stamp), "signed as before, per attempt"

    # Nothing is due any more: later ticks send nothing.
    await jobs_of(restarted).tick(second_due + timedelta(hours=30))
    assert len(receiver.received) == 3

    # Redeliver: sent again at once, a fresh delivery whose attempt is visible in the answer.
    owner = await restarted.post(
        f"/api/installs/{env['install_id']}/runs/{run_id}/callback/redeliver", headers=env["key"]
    )
    assert owner.status == 200, await owner.text()
    record = await owner.json()
    assert record["status"] == "delivered" and len(record["attempts"]) == 4
    assert record["attempts"][-1]["status"] == 204 and len(receiver.received) == 4

    # Another tenant, another install's run, a run without a callback: 404.
    stranger = await signup(restarted)
    path = f"/api/installs/{env['install_id']}/runs/{run_id}/callback/redeliver"
    assert (await restarted.post(path, headers=stranger.cookie)).status == 404
    missing = await restarted.post(
        f"/api/installs/{env['install_id']}/runs/no-such-run/callback/redeliver", headers=env["key"]
    )
    assert missing.status == 404 and (await missing.json())["error"] == "This run has no callback"
    assert len(receiver.received) == 4


async def test_two_job_runners_send_a_due_attempt_once(make_client, aiohttp_server, store):
    receiver = Receiver(failures=1)
    env = await setup(make_client, aiohttp_server, receiver)
    run_id = await trigger(env)
    doc = await record_after(store, run_id, 1)
    later = aware(doc["nextAttemptAt"]) + timedelta(seconds=1)
    second = await make_client(rate_limit_multiplier=None, providers=provider_settings(env["url"]))
    runners = [jobs_of(env["client"]), jobs_of(second), jobs_of(env["client"]), jobs_of(second)]
    await asyncio.gather(*(j.tick(later) for j in runners))
    doc = await record_after(store, run_id, 2)
    assert len(receiver.received) == 2 and len(doc["attempts"]) == 2 and doc["status"] == "delivered"


async def test_the_attempts_are_bounded_and_a_refusal_is_final(make_client, aiohttp_server, store):
    receiver = Receiver(failures=100)
    env = await setup(make_client, aiohttp_server, receiver, callback_max_attempts=3)
    run_id = await trigger(env)
    doc = await record_after(store, run_id, 1)
    jobs = jobs_of(env["client"])
    for count in (2, 3):
        await jobs.tick(aware(doc["nextAttemptAt"]) + timedelta(seconds=1))
        doc = await record_after(store, run_id, count)
    assert doc["status"] == "failed" and "nextAttemptAt" not in doc
    await jobs.tick(utcnow() + timedelta(days=2))
    assert len(receiver.received) == 3, "no attempt after the last one"

    # A receiver that answers 4xx has refused for good: no retry.
    refusing = Receiver(failures=0, final_status=410)
    server = await aiohttp_server(refusing.app())
    env["hook"] = str(server.make_url("/hook"))
    run_id = await trigger(env)
    doc = await record_after(store, run_id, 1)
    assert doc["status"] == "failed" and doc["attempts"][0]["status"] == 410


async def test_a_held_delivery_is_left_to_its_holder_until_its_lease_runs_out(
    make_client, aiohttp_server, store
):
    """A delivery another attempt holds (its lease not run out) is neither redelivered (409) nor
    retried by the job runner; once the lease has run out, the next runner takes it."""
    receiver = Receiver(failures=1)
    env = await setup(make_client, aiohttp_server, receiver)
    run_id = await trigger(env)
    doc = await record_after(store, run_id, 1)
    held_until = utcnow() + timedelta(minutes=5)
    await store["callbacks"].update_one(
        {"_id": run_id}, {"$set": {"leasedUntil": held_until, "lease": "another attempt"}}
    )
    path = f"/api/installs/{env['install_id']}/runs/{run_id}/callback/redeliver"
    busy = await env["client"].post(path, headers=env["key"])
    assert busy.status == 409
    assert (await busy.json())["error"] == (
        "A delivery attempt of this callback is in progress; try again shortly"
    )
    await jobs_of(env["client"]).tick(aware(doc["nextAttemptAt"]) + timedelta(seconds=1))
    assert len(receiver.received) == 1, "the held attempt is not made a second time"
    await jobs_of(env["client"]).tick(held_until + timedelta(seconds=1))
    doc = await record_after(store, run_id, 2)
    assert doc["status"] == "delivered" and len(receiver.received) == 2
