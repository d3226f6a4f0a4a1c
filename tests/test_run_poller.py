"""The orchB run poller against the fake Relevance AI upstream, inside the running app."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta

import pytest

from api.context import SERVICES
from config.settings import Settings
from svc.core.clock import aware
from svc.installs.run_poller import RunPoller
from tests.support.accounts import bearer
from tests.support.installs import install_ok, orch_b_credentials, start_fake_orch_b
from tests.support.runs import orch_b_install, paid_template
from tests.support.templates import user_with_key


@pytest.fixture
async def client(make_client):
    return await make_client(rate_limit_multiplier=None)


@pytest.fixture
async def fake(aiohttp_server, monkeypatch):
    return await start_fake_orch_b(aiohttp_server, monkeypatch)


def poller(client) -> RunPoller:
    """The app's own poller."""
    return client.server.app[SERVICES].run_poller


async def test_each_finished_conversation_is_counted_once(client, fake, store):
    _, key = await user_with_key(client)
    template = await paid_template(client, key)
    install_id, agents = await orch_b_install(client, key, fake, template["id"])
    now = datetime.now(UTC).replace(microsecond=0)
    fake.add_conversation(agents["lead"], "completed", now - timedelta(minutes=9), "c-1")
    fake.add_conversation(agents["writer"], "unrecoverable", now - timedelta(minutes=8), "c-2")
    fake.add_conversation(agents["lead"], "running", now - timedelta(minutes=7), "c-busy")

    assert await poller(client).poll_once() == 2
    doc = await store.installs.find_one({"_id": install_id})
    assert aware(doc["pollCursor"]) == now - timedelta(minutes=8), "the newest finished update seen"

    fake.add_conversation(agents["writer"], "completed", now - timedelta(minutes=1), "c-3")
    fake.conversations[2]["conversation"]["state"] = "completed"  # c-busy finishes now
    fake.conversations[2]["update_date"] = (now - timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    assert await poller(client).poll_once() == 2
    assert await poller(client).poll_once() == 0, "nothing new upstream"

    runs = await store["runs"].find({"installId": install_id}).sort("runId", 1).to_list(None)
    assert [(r["runId"], r["agentKey"], r["status"]) for r in runs] == [
        ("c-1", "lead", "completed"),
        ("c-2", "writer", "failed"),
        ("c-3", "writer", "completed"),
        ("c-busy", "lead", "completed"),
    ]
    assert all(r["source"] == "poll" and r["platform"] == "orchB" for r in runs)
    assert all(r["inputTokens"] is None and r["outputTokens"] is None for r in runs)
    assert runs[1]["errorMessage"] == "conversation state unrecoverable"
    assert aware(runs[0]["createdAt"]) >= now - timedelta(seconds=1), "dated when recorded, not backdated"
    doc = await store.installs.find_one({"_id": install_id})
    assert aware(doc["pollCursor"]) == now - timedelta(seconds=30)


async def test_the_cursor_is_sent_as_since(client, fake, store):
    """After a poll the driver stops paging at the cursor: one page even with 250 older conversations."""
    _, key = await user_with_key(client)
    template = await paid_template(client, key)
    install_id, agents = await orch_b_install(client, key, fake, template["id"])
    now = datetime.now(UTC)
    for i in range(250):
        fake.add_conversation(agents["lead"], "completed", now - timedelta(minutes=10, seconds=i), f"old-{i}")
    assert await poller(client).poll_once() == 250
    listed = len(fake.paths("GET"))
    fake.add_conversation(agents["lead"], "completed", now, "new")
    assert await poller(client).poll_once() == 1
    assert len(fake.paths("GET")) == listed + 1, "one page: the driver stopped at the cursor"
    assert await store["runs"].count_documents({"installId": install_id}) == 251


async def test_one_failing_install_does_not_stop_the_others(client, fake, store, caplog):
    _, key = await user_with_key(client)
    template = await paid_template(client, key)
    _, good_agents = await orch_b_install(client, key, fake, template["id"])
    bad_id, bad_agents = await orch_b_install(client, key, fake, template["id"])
    stale = {**orch_b_credentials(fake), "apiKey": "stale-key-do-not-log"}
    vault = client.server.app[SERVICES].vault
    await store.installs.update_one(
        {"_id": bad_id}, {"$set": {"credentialsEncrypted": vault.encrypt(json.dumps(stale))}}
    )
    now = datetime.now(UTC)
    fake.add_conversation(good_agents["lead"], "completed", now, "good-run")
    fake.add_conversation(bad_agents["lead"], "completed", now, "bad-run")

    with caplog.at_level(logging.INFO):
        assert await poller(client).poll_once() == 1

    assert [r["runId"] for r in await store["runs"].find().to_list(None)] == ["good-run"]
    failures = [r for r in caplog.records if r.getMessage() == "run poll failed"]
    assert len(failures) == 1 and failures[0].installId == bad_id
    logged = " ".join(str(vars(r)) for r in caplog.records)
    assert "stale-key-do-not-log" not in logged and fake.api_key not in logged
    assert "pollCursor" not in await store.installs.find_one({"_id": bad_id})


async def test_only_active_orch_b_installs_are_polled(client, fake, store):
    _, key = await user_with_key(client)
    template = await paid_template(client, key)
    install_id, agents = await orch_b_install(client, key, fake, template["id"])
    deleted = await client.delete(f"/api/installs/{install_id}", headers=bearer(key))
    assert deleted.status == 200
    svc = await install_ok(client, key, templateId=template["id"], platform="svc")
    fake.add_conversation(agents["lead"], "completed", datetime.now(UTC), "after-cancel")

    assert await poller(client).poll_once() == 0
    assert fake.paths("GET") == []
    assert await store["runs"].count_documents({}) == 0
    assert svc["platform"] == "svc"


async def test_poll_with_no_installs_is_zero(client):
    assert await poller(client).poll_once(now=datetime.now(UTC)) == 0


def test_poll_interval_setting():
    assert Settings.from_env({}).run_poll_seconds == 300
    assert Settings.from_env({"SVC_RUN_POLL_SECONDS": "60"}).run_poll_seconds == 60
    for bad in ("0", "-5", "soon"):
        with pytest.raises(ValueError, match="SVC_RUN_POLL_SECONDS"):
            Settings.from_env({"SVC_RUN_POLL_SECONDS": bad})


async def test_the_scheduler_jobs_poll_every_interval(client, fake, store):
    """`Jobs.tick` (what the scheduler actor runs each second) polls once per SVC_RUN_POLL_SECONDS."""
    from svc.jobs import Jobs

    _, key = await user_with_key(client)
    template = await paid_template(client, key)
    install_id, agents = await orch_b_install(client, key, fake, template["id"])
    now = datetime.now(UTC).replace(microsecond=0)
    fake.add_conversation(agents["lead"], "completed", now - timedelta(minutes=2), "c-1")
    jobs = Jobs.for_services(client.server.app[SERVICES])
    interval = client.server.app[SERVICES].settings.run_poll_seconds
    await jobs.tick(now)
    assert await store["runs"].count_documents({"installId": install_id}) == 1
    fake.add_conversation(agents["lead"], "completed", now - timedelta(minutes=1), "c-2")
    await jobs.tick(now + timedelta(seconds=interval - 1))
    assert await store["runs"].count_documents({"installId": install_id}) == 1, "not due yet"
    await jobs.tick(now + timedelta(seconds=interval))
    assert await store["runs"].count_documents({"installId": install_id}) == 2
