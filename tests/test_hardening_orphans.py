"""Upstream agents are recorded as they are made, so a killed provisioning leaves nothing behind."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest

from api.context import SERVICES
from svc.core import new_id, utcnow
from svc.installs import CreateInstallBody
from tests.support.accounts import app_store
from tests.support.installs import orch_b_credentials, published_team, start_fake_orch_b
from tests.support.templates import user_with_key


async def test_a_request_killed_mid_provisioning_leaves_no_agent_and_no_install(
    make_client, aiohttp_server, monkeypatch
):
    fake = await start_fake_orch_b(aiohttp_server, monkeypatch)
    client = await make_client(rate_limit_multiplier=None)
    _user, key = await user_with_key(client)
    template = await published_team(client, key)
    services = client.server.app[SERVICES]
    principal = await services.credentials.from_api_key(key)
    body = CreateInstallBody(
        templateId=template["id"], platform="orchB", credentials=orch_b_credentials(fake)
    )
    # The first agent exists upstream, the second request is on its way and (once let go) fails
    # upstream. An upsert that *succeeds* upstream after the kill returns an id nobody reads: that
    # agent is not covered (docs/platforms/orchB.md, "Orphans").
    fake.hold_upsert_at = 2
    fake.fail_upsert_at = 2

    creating = asyncio.create_task(services.installs.create(principal, body))
    await asyncio.wait_for(fake.holding.wait(), 30)
    store = app_store(client)
    pending = await store.installs.find_one({"templateId": template["id"]})
    assert pending is not None and pending["status"] == "pending"
    assert [a["externalId"] for a in pending["upstreamCreated"]] == fake.created, "recorded before finishing"

    creating.cancel()  # the request is killed mid-provisioning
    fake.release.set()
    with pytest.raises(asyncio.CancelledError):
        await creating
    assert fake.agents == {}, "what was made upstream is deleted"
    assert await store.installs.count_documents({"templateId": template["id"]}) == 0


async def test_the_sweeper_removes_what_a_crashed_provisioning_left(make_client, aiohttp_server, monkeypatch):
    fake = await start_fake_orch_b(aiohttp_server, monkeypatch)
    client = await make_client(rate_limit_multiplier=None)
    services = client.server.app[SERVICES]
    store = app_store(client)
    # What a process killed mid-provisioning leaves: agents upstream, a pending install recording them.
    fake.agents["agent-1"] = {"agent_id": "agent-1", "name": "Lead"}
    fake.agents["agent-2"] = {"agent_id": "agent-2", "name": "Writer"}
    install_id = new_id()
    created = utcnow() - timedelta(hours=1)
    await store.installs.insert_one(
        {
            "_id": install_id,
            "templateId": "a-template",  # every install names its template (its slot is given back)
            "platform": "orchB",
            "status": "pending",
            "owner": {"kind": "user", "id": "someone"},
            "credentialsEncrypted": services.vault.encrypt(json.dumps(orch_b_credentials(fake))),
            "upstreamCreated": [
                {"key": "lead", "externalId": "agent-1", "name": "Lead"},
                {"key": "writer", "externalId": "agent-2", "name": "Writer"},
            ],
            "createdAt": created,
        }
    )
    # A young pending install (provisioning right now) and a finished one are left alone.
    young = new_id()
    await store.installs.insert_one(
        {"_id": young, "platform": "orchB", "status": "pending", "createdAt": utcnow(), "upstreamCreated": []}
    )
    assert await services.installs.sweep_abandoned() == 1
    assert fake.agents == {}
    assert await store.installs.count_documents({"_id": install_id}) == 0
    assert await store.installs.count_documents({"_id": young}) == 1


async def test_orch_a_and_orch_c_record_each_agent_as_it_is_made(make_client, aiohttp_server, monkeypatch):
    """Every driver that creates agents upstream reports each one at once, so the sweeper (and a
    failed finish) can remove what a crash left: the stored record lists them before the install
    completes."""
    from plugins.builtin import orch_c_bedrock
    from tests.fakes.orch_c import FakeBedrockAgents
    from tests.fakes.orch_c import create_app as bedrock_app
    from tests.support.runs import orch_a_install, paid_template, start_paperclip

    client = await make_client(rate_limit_multiplier=None)
    _user, key = await user_with_key(client)
    store = app_store(client)
    paperclip = await start_paperclip(aiohttp_server)
    template = await paid_template(client, key)
    install, _ = await orch_a_install(client, key, paperclip, template["id"])
    doc = await store.installs.find_one({"_id": install["installId"]})
    assert sorted(a["externalId"] for a in doc["upstreamCreated"]) == sorted(
        a["externalId"] for a in install["deployedAgents"]
    )

    bedrock = FakeBedrockAgents()
    server = await aiohttp_server(bedrock_app(bedrock))
    monkeypatch.setenv(orch_c_bedrock.ENDPOINT_ENV, f"http://127.0.0.1:{server.port}")
    credentials = bedrock.credentials()
    created = await client.post(
        "/api/installs",
        json={"templateId": template["id"], "platform": "orchC", "credentials": credentials},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert created.status == 201, await created.text()
    body = await created.json()
    doc = await store.installs.find_one({"_id": body["installId"]})
    assert sorted(a["externalId"] for a in doc["upstreamCreated"]) == sorted(
        a["externalId"] for a in body["deployedAgents"]
    )
