"""orchA heartbeats end to end against the recorded-shape fake: Paperclip assigns an issue, our
runtime runs the `http` agent on it, writes the outcome back to the issue within Paperclip's run,
and a failed run is a non-2xx answer so Paperclip fails it too."""

from __future__ import annotations

import aiohttp
import pytest

from tests.fakes.orch_a import FakePaperclip, recorded
from tests.support.accounts import bearer, create_key, signup
from tests.support.runtime import member, provider_settings, start_llm
from tests.support.templates import publish_template


@pytest.fixture
async def world(make_client, aiohttp_server):
    """The service (with a fake model provider), a fake Paperclip delivering heartbeats to it, and
    one install of a one-agent `http` team."""
    llm, url = await start_llm(aiohttp_server)
    client = await make_client(rate_limit_multiplier=None, providers=provider_settings(url))
    fake = FakePaperclip()
    server = await aiohttp_server(fake.app())
    fake.base_url = str(server.make_url("")).rstrip("/")
    fake.deliver_to = str(client.make_url("")).rstrip("/")
    caller = await signup(client)
    key = await create_key(client, caller)
    team = {"agents": [member("writer", adapterType="http", prompt="You write launch notes.")]}
    template = await publish_template(client, key, visibility="public", definition=team)
    body = {
        "templateId": template["id"],
        "companyName": "Acme",
        "credentials": {"orchABaseUrl": fake.base_url, "orchAApiKey": fake.api_key},
    }
    response = await client.post("/api/installs", json=body, headers=bearer(key))
    assert response.status == 201, await response.text()
    install = await response.json()
    return client, llm, fake, install, key


async def assign(fake: FakePaperclip, company_id: str, agent_id: str, title: str, text: str) -> str:
    """Create an issue assigned to the agent through the fake's API, as a board user would."""
    async with aiohttp.ClientSession() as session:
        response = await session.post(
            f"{fake.base_url}/api/companies/{company_id}/issues",
            json={"title": title, "description": text, "assigneeAgentId": agent_id, "status": "todo"},
            headers={"Authorization": f"Bearer {fake.api_key}"},
        )
        assert response.status == 201
        return str((await response.json())["id"])


async def test_an_assigned_issue_is_the_task_and_its_outcome_is_written_back(world, store):
    _, llm, fake, install, _ = world
    agent_id = install["deployedAgents"][0]["externalId"]
    llm.script(text="Launch note: it ships on Monday.", input_tokens=40, output_tokens=9)
    issue_id = await assign(fake, install["companyId"], agent_id, "Write the launch note", "Two lines.")
    await fake.settled()
    [beat] = fake.heartbeats
    assert beat["status"] == 200, beat["answer"]
    assert len(str(beat["body"])) > 5000, "the fake sends the real heartbeat, not a hand-written one"
    prompt = llm.requests[0].body["messages"][0]["content"]
    assert "Write the launch note" in prompt and "Two lines." in prompt
    issue = fake.issues[issue_id]
    assert issue["status"] == "done", "the disposition Paperclip asks for is written within the run"
    assert issue["comments"] == ["Launch note: it ships on Monday."]
    assert fake.runs[beat["runId"]]["status"] == "succeeded"
    run = await store["runs"].find_one({"installId": install["installId"]})
    assert run["platformRunId"] == beat["runId"] and run["platformAgentId"] == agent_id
    assert run["status"] == "completed" and run["inputTokens"] == 40


async def test_a_failed_run_is_failed_in_paperclip_and_writes_nothing(world, store):
    _, llm, fake, install, _ = world
    agent_id = install["deployedAgents"][0]["externalId"]
    llm.fail_next(5, status=400, message="model refused")
    issue_id = await assign(fake, install["companyId"], agent_id, "Doomed", "This run fails.")
    await fake.settled()
    [beat] = fake.heartbeats
    assert beat["status"] == 502 and "The run failed" in beat["answer"]
    assert fake.runs[beat["runId"]]["status"] == "failed", "Paperclip's http adapter fails non-2xx"
    assert fake.issues[issue_id]["comments"] == []
    run = await store["runs"].find_one({"installId": install["installId"]})
    assert run["status"] == "failed" and run["platformRunId"] == beat["runId"]


async def test_an_on_demand_wakeup_without_an_issue_runs_a_generic_task(world):
    _, llm, fake, install, _ = world
    agent_id = install["deployedAgents"][0]["externalId"]
    llm.script(text="Nothing to do.")
    async with aiohttp.ClientSession() as session:
        response = await session.post(
            f"{fake.base_url}/api/agents/{agent_id}/wakeup",
            json={"source": "on_demand", "reason": "manual"},
            headers={"Authorization": f"Bearer {fake.api_key}"},
        )
        assert response.status == recorded("wakeup")["status"] == 202
    await fake.settled()
    assert fake.heartbeats[0]["status"] == 200
    assert "wake reason" in llm.requests[0].body["messages"][0]["content"]


async def test_a_heartbeat_with_a_wrong_secret_or_unknown_agent_is_401_and_records_nothing(world, store):
    client, llm, fake, install, _ = world
    agent_id = install["deployedAgents"][0]["externalId"]
    beat = recorded("heartbeat_issue_assigned")["body"] | {"agentId": agent_id}
    secret = fake.agents[agent_id]["adapterConfig"]["headers"]
    wrong = await client.post("/api/runtime/webhook", json=beat, headers={"X-Svc-Webhook-Secret": "nope"})
    unknown = await client.post("/api/runtime/webhook", json=beat | {"agentId": "ag-unknown"}, headers=secret)
    assert wrong.status == unknown.status == 401
    assert await wrong.json() == {"error": "Invalid runtime credential"}
    assert await store["runs"].count_documents({}) == 0 and llm.requests == []
