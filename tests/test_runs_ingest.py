"""POST /api/runs/ingest (install token) and its token rule, over HTTP; reports (ingest and the
self-report) refused where the managed runtime records the runs itself."""

from __future__ import annotations

import itertools

import aiohttp
import pytest

from tests.support.accounts import bearer
from tests.support.installs import managed_install, start_fake_orch_b
from tests.support.runs import (
    ingest,
    ingest_body,
    issue_token,
    orch_a_install,
    orch_b_install,
    paid_template,
    start_paperclip,
)
from tests.support.runtime import managed_client, member
from tests.support.templates import publish_template, user_with_key
from tests.support.waiting import wait_settled


@pytest.fixture
async def paperclip(aiohttp_server):
    return await start_paperclip(aiohttp_server)


@pytest.fixture
async def client(make_client):
    return await make_client(rate_limit_multiplier=None)


async def setup_orch_a(client, paperclip, pricing="free"):
    """A builder's template and an orchA install of it; (key, install, token, {agentKey: externalId})."""
    _, key = await user_with_key(client)
    template = await paid_template(client, key, pricing)
    install, token = await orch_a_install(client, key, paperclip, template["id"])
    agents = {a["key"]: a["externalId"] for a in install["deployedAgents"]}
    return key, install, token, agents


async def test_ingest_records_once_and_answers_repeats_the_same(client, paperclip, store):
    _, install, token, agents = await setup_orch_a(client, paperclip)
    body = ingest_body(agents["writer"], runId="task-42", inputTokens=120, outputTokens=30)

    first = await ingest(client, token, body)
    assert first.status == 200, await first.text()
    again = await ingest(client, token, body)
    changed = await ingest(client, token, {**body, "status": "failed", "inputTokens": 1})

    assert (
        await first.json() == await again.json() == await changed.json() == {"ok": True, "runId": "task-42"}
    )
    runs = await store["runs"].find({"installId": install["installId"]}).to_list(None)
    assert len(runs) == 1
    run = runs[0]
    assert (run["agentKey"], run["platformAgentId"], run["platform"]) == ("writer", agents["writer"], "orchA")
    assert (run["status"], run["inputTokens"], run["outputTokens"]) == ("completed", 120, 30)
    assert run["source"] == "ingest" and run["errorMessage"] is None


async def test_failed_run_keeps_its_error_message(client, paperclip, store):
    _, install, token, agents = await setup_orch_a(client, paperclip)
    body = ingest_body(agents["lead"], runId="r-f", status="failed", errorMessage="tool crashed")
    assert (await ingest(client, token, body)).status == 200
    run = await store["runs"].find_one({"installId": install["installId"]})
    assert (run["status"], run["errorMessage"], run["agentKey"]) == ("failed", "tool crashed", "lead")


async def test_agent_can_be_named_by_key(client, paperclip, store):
    _, _, token, agents = await setup_orch_a(client, paperclip)
    body = ingest_body(agents["lead"], runId="by-key")
    del body["platformAgentId"]
    body["agentKey"] = "writer"
    assert (await ingest(client, token, body)).status == 200
    assert (await store["runs"].find_one({"runId": "by-key"}))["agentKey"] == "writer"
    mismatch = await ingest(client, token, {**body, "runId": "x", "platformAgentId": agents["lead"]})
    assert mismatch.status == 400


async def test_only_an_install_token_is_accepted(client, paperclip, store):
    caller, key = await user_with_key(client)
    template = await paid_template(client, key)
    install, token = await orch_a_install(client, key, paperclip, template["id"])
    body = ingest_body(install["deployedAgents"][0]["externalId"])

    personal_key = await ingest(client, key, body)
    assert personal_key.status == 401
    assert (await ingest(client, "svc_install_" + "x" * 43, body)).status == 401
    assert (await ingest(client, token + "x", body)).status == 401
    missing = await client.post("/api/runs/ingest", json=body)
    assert missing.status == 401
    cookie = await client.post("/api/runs/ingest", json=body, headers=caller.cookie)
    assert cookie.status == 401
    assert "error" in await personal_key.json()
    assert await store["runs"].count_documents({}) == 0


async def test_a_token_reaches_only_its_own_install(client, paperclip, store):
    _, _, first_token, _ = await setup_orch_a(client, paperclip)
    _, _, _, second_agents = await setup_orch_a(client, paperclip)
    response = await ingest(client, first_token, ingest_body(second_agents["lead"]))
    assert response.status == 400 and "platformAgentId" in (await response.json())["error"]
    assert await store["runs"].count_documents({}) == 0


@pytest.mark.parametrize(
    ("change", "mentions"),
    [
        ({"inputTokens": -1}, "inputTokens"),
        ({"outputTokens": -5}, "outputTokens"),
        ({"inputTokens": 1.5}, "inputTokens"),
        ({"inputTokens": "100"}, "inputTokens"),
        ({"outputTokens": True}, "outputTokens"),
        ({"status": "done"}, "status"),
        ({"status": "running"}, "status"),
        ({"runId": ""}, "runId"),
        ({"runId": None}, "runId"),
        ({"platform": "orchB"}, "platform"),
        ({"platform": None}, "platform"),
        ({"platformAgentId": "someone-else"}, "platformAgentId"),
        ({"platformAgentId": None}, "platformAgentId"),
        ({"errorMessage": 5}, "errorMessage"),
    ],
)
async def test_invalid_reports_are_400(client, paperclip, store, change, mentions):
    _, _, token, agents = await setup_orch_a(client, paperclip)
    response = await ingest(client, token, {**ingest_body(agents["lead"]), **change})
    assert response.status == 400, await response.text()
    assert mentions in (await response.json())["error"]
    assert await store["runs"].count_documents({}) == 0


async def test_malformed_body_is_400(client, paperclip):
    _, _, token, _ = await setup_orch_a(client, paperclip)
    response = await client.post(
        "/api/runs/ingest", data=b"{not json", headers={**bearer(token), "Content-Type": "application/json"}
    )
    assert response.status == 400


async def test_per_k_tokens_needs_token_counts(client, paperclip, store):
    _, install, token, agents = await setup_orch_a(client, paperclip, pricing="per_k_tokens")
    without = ingest_body(agents["lead"], runId="no-tokens")
    del without["inputTokens"], without["outputTokens"]

    refused = await ingest(client, token, without)
    assert refused.status == 400
    error = (await refused.json())["error"]
    assert "inputTokens" in error and "outputTokens" in error and "per_k_tokens" in error
    half = await ingest(client, token, {**without, "inputTokens": 10})
    assert half.status == 400 and "outputTokens" in (await half.json())["error"]
    nulls = await ingest(client, token, {**without, "inputTokens": None, "outputTokens": None})
    assert nulls.status == 400
    ok = await ingest(client, token, {**without, "inputTokens": 0, "outputTokens": 0})
    assert ok.status == 200
    assert await store["runs"].count_documents({"installId": install["installId"]}) == 1


async def test_other_pricing_models_take_runs_without_tokens(client, paperclip):
    for pricing in ("free", "per_run"):
        _, _, token, agents = await setup_orch_a(client, paperclip, pricing=pricing)
        body = ingest_body(agents["lead"], runId=f"r-{pricing}")
        del body["inputTokens"], body["outputTokens"]
        assert (await ingest(client, token, body)).status == 200


async def test_orch_b_is_exempt_from_the_token_rule(client, aiohttp_server, monkeypatch, store):
    _, key = await user_with_key(client)
    template = await paid_template(client, key, "per_k_tokens")
    fake = await start_fake_orch_b(aiohttp_server, monkeypatch)
    install_id, agents = await orch_b_install(client, key, fake, template["id"])
    token = await issue_token(client, install_id)
    agent_id = next(iter(agents.values()))
    body = {"platformAgentId": agent_id, "platform": "orchB", "runId": "conv-1", "status": "completed"}
    response = await ingest(client, token, body)
    assert response.status == 200, await response.text()
    run = await store["runs"].find_one({"installId": install_id})
    assert run["inputTokens"] is None and run["outputTokens"] is None


# ---- the managed runtime records its runs itself ----------------------------------------------
# The self-report's token rule is tested where the self-report belongs, on orchC
# (tests/test_installs_orch_c.py).

MANAGED_REPORT = (
    "This install runs on the managed runtime, which records every run itself; run reports are refused"
)
RUNTIME_RUN_ID = "This runId belongs to a run of the managed runtime, which records it itself"
GATED = {
    "version": "v1",
    "agents": [member("lead"), member("writer", reportsTo="lead")],
    "gates": [{"name": "g", "after": "lead"}],
}


async def test_reports_for_a_managed_install_are_refused_and_store_nothing(
    make_client, aiohttp_server, store
):
    client, llm = await managed_client(make_client, aiohttp_server)
    _, key = await user_with_key(client)
    template = await publish_template(
        client, key, visibility="public", pricingModel="per_run", priceUsdCents=25, definition=GATED
    )
    install_id = (await managed_install(client, key, template["id"]))["installId"]
    # A run of the runtime, held at its gate: its id is known, its end not yet written.
    llm.script(text="drafted", input_tokens=10, output_tokens=5)
    ran = await client.post(f"/api/installs/{install_id}/run", json={"task": "go"}, headers=bearer(key))
    assert ran.status == 200 and (await ran.json())["pausedAtGate"] == "g", await ran.text()
    run_id = (await ran.json())["runId"]
    token = await issue_token(client, install_id)

    async def refused_everywhere() -> None:
        """The deployer's self-report and an install-token ingest, naming the run or another: 409."""
        url = f"/api/installs/{install_id}/runs"
        for named in (run_id, "made-up", None):
            body = {"agentKey": "lead", "status": "failed", "inputTokens": 0, "outputTokens": 0}
            response = await client.post(url, json={**body, "runId": named}, headers=bearer(key))
            assert response.status == 409, await response.text()
            assert await response.json() == {"error": MANAGED_REPORT}
            report = {**body, "platform": "svc", "runId": named or "made-up-too"}
            response = await ingest(client, token, report)
            assert response.status == 409, await response.text()
            assert await response.json() == {"error": MANAGED_REPORT}

    await refused_everywhere()
    assert await store["runs"].count_documents({"installId": install_id}) == 0, "nothing stored"
    # The run goes on to its end: its record is the runtime's, counted and billed once.
    llm.script(text="sent", input_tokens=7, output_tokens=3)
    go_on = await client.post(f"/api/installs/{install_id}/continue", json={}, headers=bearer(key))
    assert go_on.status == 200, await go_on.text()
    await wait_settled(store, run_id)
    await refused_everywhere()
    runs = await store["runs"].find({"installId": install_id}).to_list(None)
    assert [(r["runId"], r["status"], r["inputTokens"], r["outputTokens"]) for r in runs] == [
        (run_id, "completed", 17, 8)
    ]
    usage = await (await client.get(f"/api/billing?templateId={template['id']}", headers=bearer(key))).json()
    assert (usage["usage"]["completedRuns"], usage["billing"]["totalAmountCents"]) == (1, 25)


async def test_a_report_naming_a_run_of_the_runtime_is_refused_on_an_install_that_takes_reports(
    make_client, aiohttp_server, store
):
    # A mixed orchA team: `desk` is an `http` agent the runtime runs on Paperclip's heartbeats,
    # `writer` runs on Paperclip and reports through the install token.
    client, llm = await managed_client(make_client, aiohttp_server)
    paperclip = await start_paperclip(aiohttp_server)
    paperclip.deliver_to = str(client.make_url("")).rstrip("/")
    _, key = await user_with_key(client)
    team = {"version": "v1", "agents": [member("desk", adapterType="http"), member("writer")]}
    template = await publish_template(client, key, visibility="public", definition=team)
    install, token = await orch_a_install(client, key, paperclip, template["id"])
    install_id = install["installId"]
    agents = {a["key"]: a["externalId"] for a in install["deployedAgents"]}
    llm.script(text="Done for today.", input_tokens=40, output_tokens=9)
    async with aiohttp.ClientSession() as session:
        woken = await session.post(
            f"{paperclip.base_url}/api/agents/{agents['desk']}/wakeup",
            json={"source": "on_demand", "reason": "manual"},
            headers={"Authorization": f"Bearer {paperclip.api_key}"},
        )
        assert woken.status == 202
    await paperclip.settled()
    assert [beat["status"] for beat in paperclip.heartbeats] == [200]
    [runtime_run] = await store["pipeline_runs"].find({"installId": install_id}).to_list(None)
    await wait_settled(store, runtime_run["_id"])

    # A report naming the runtime's run (by our id or Paperclip's), for either agent: refused,
    # the runtime's record kept.
    assert runtime_run["platformRunId"] not in (None, runtime_run["_id"])
    ids = (runtime_run["_id"], runtime_run["platformRunId"])
    for agent, named in itertools.product(("desk", "writer"), ids):
        body = ingest_body(agents[agent], runId=named, status="failed", inputTokens=0, outputTokens=0)
        response = await ingest(client, token, body)
        assert response.status == 409, await response.text()
        assert await response.json() == {"error": RUNTIME_RUN_ID}
    [record] = await store["runs"].find({"installId": install_id}).to_list(None)
    assert (record["runId"], record["agentKey"], record["status"]) == (
        runtime_run["_id"],
        "desk",
        "completed",
    )
    assert (record["inputTokens"], record["outputTokens"]) == (40, 9)
    # The install takes the writer's own runs as ever.
    own = await ingest(client, token, ingest_body(agents["writer"], runId="writer-run-1"))
    assert own.status == 200, await own.text()
    assert await store["runs"].count_documents({"installId": install_id}) == 2


async def test_cancelled_install_refuses_reports_but_repeats_still_answer(client, paperclip, store):
    _, install, token, agents = await setup_orch_a(client, paperclip)
    recorded = ingest_body(agents["lead"], runId="before-cancel")
    assert (await ingest(client, token, recorded)).status == 200
    # A cancel that keeps the token (billing's cancel marks the install cancelled).
    await store.installs.update_one({"_id": install["installId"]}, {"$set": {"status": "cancelled"}})

    refused = await ingest(client, token, ingest_body(agents["lead"], runId="after-cancel"))
    assert refused.status == 409 and "cancelled" in (await refused.json())["error"]
    repeat = await ingest(client, token, recorded)
    assert repeat.status == 200 and await repeat.json() == {"ok": True, "runId": "before-cancel"}
    assert await store["runs"].count_documents({}) == 1


async def test_deleted_install_token_no_longer_works(client, paperclip):
    key, install, token, agents = await setup_orch_a(client, paperclip)
    deleted = await client.delete(f"/api/installs/{install['installId']}", headers=bearer(key))
    assert deleted.status == 200
    assert (await ingest(client, token, ingest_body(agents["lead"]))).status == 401
