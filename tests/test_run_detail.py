"""GET /api/installs/:installId/runs/:runId over real HTTP: what happened in a run (docs/runs.md)."""

from __future__ import annotations

import uuid
from dataclasses import asdict
from datetime import UTC, datetime

from api.schemas.run_watch import RunDetailReply, RunSecurityEntry
from api.schemas.runtime import SecurityRequest
from svc.runtime import RUN_SECURITY_FIELDS, SECURITY_FIELDS, McpCallRecord
from svc.runtime.run_detail import security_entry
from tests.support.accounts import bearer, create_key, signup
from tests.support.installs import install_ok
from tests.support.runs import TEAM, ingest, ingest_body, orch_a_install, start_paperclip
from tests.support.runtime import managed_client, member, start_target
from tests.support.templates import publish_template

BLOCKING_POLICY = {
    "accessPolicyVersion": "1",
    "defaultAction": "deny",
    "rules": [{"match": {"host": "allowed.example.com"}, "action": "allow"}],
}


async def deal(client, price=25):
    """A builder's paid team (a lead and a helper whose policy blocks the target), and another
    user's install of it: (builder key, deployer key, install id)."""
    builder = await signup(client)
    builder_key = bearer(await create_key(client, builder))
    team = {
        "version": "v1",
        "agents": [member("lead"), member("helper", reportsTo="lead", accessPolicy=BLOCKING_POLICY)],
    }
    template = await publish_template(
        client, builder_key["Authorization"][7:], definition=team, pricingModel="per_run", priceUsdCents=price
    )
    deployer = await signup(client)
    deployer_key = await create_key(client, deployer)
    created = await install_ok(client, deployer_key, templateId=template["id"], platform="svc")
    return builder_key, bearer(deployer_key), created["installId"]


async def delegated_run(client, llm, key, install_id, target_url):
    """The lead delegates; the helper's request is blocked by its policy; the lead answers."""
    llm.script(
        tool_calls=[{"name": "delegate_helper", "arguments": {"task": "look it up"}}],
        input_tokens=100,
        output_tokens=10,
    )
    llm.script(
        tool_calls=[{"name": "http_request", "arguments": {"method": "GET", "url": target_url}}],
        input_tokens=40,
        output_tokens=4,
    )
    llm.script(text="could not reach it", input_tokens=50, output_tokens=20)
    llm.script(text="final answer", input_tokens=120, output_tokens=30)
    response = await client.post(
        f"/api/installs/{install_id}/run", json={"task": "Find the price"}, headers=key
    )
    assert response.status == 200, await response.text()
    return await response.json()


async def detail(client, key, install_id, run_id, status=200):
    response = await client.get(f"/api/installs/{install_id}/runs/{run_id}", headers=key)
    assert response.status == status, await response.text()
    body = await response.json()
    if status == 200:
        RunDetailReply.model_validate(body)  # the answer fits what the OpenAPI document declares
    return body


async def test_detail_of_a_delegating_run_with_a_blocked_request(make_client, aiohttp_server):
    client, llm = await managed_client(make_client, aiohttp_server)
    target = await start_target(aiohttp_server)
    builder_key, deployer_key, install_id = await deal(client)
    outcome = await delegated_run(client, llm, deployer_key, install_id, f"{target.base}/secret")
    assert outcome["status"] == "completed"

    body = await detail(client, deployer_key, install_id, outcome["runId"])
    assert body["view"] == "deployer"
    assert (body["status"], body["source"], body["agent"]) == ("completed", "run", "lead")
    assert body["task"] == "Find the price" and body["response"] == "final answer"
    assert body["startedAt"] and body["endedAt"] and body["durationMs"] >= 0
    assert body["pausedAtGate"] is None and body["errorMessage"] is None
    assert (body["inputTokens"], body["outputTokens"]) == (310, 64)
    # Each step in the order it began, with its model and model calls.
    steps = [(s["agent"], s["model"], s["status"], s["iterations"]) for s in body["steps"]]
    assert steps == [
        ("lead", "providerA:small", "completed", 2),
        ("helper", "providerA:small", "completed", 2),
    ]
    assert [(s["inputTokens"], s["outputTokens"]) for s in body["steps"]] == [(220, 40), (90, 24)]
    assert all(s["durationMs"] is not None and s["error"] is None for s in body["steps"])
    assert body["tokensByAgent"] == [
        {"agent": "lead", "inputTokens": 220, "outputTokens": 40},
        {"agent": "helper", "inputTokens": 90, "outputTokens": 24},
    ]
    # The blocked request is the run's one security-log entry; the target saw nothing.
    [entry] = body["security"]
    assert (entry["agentKey"], entry["decision"], entry["statusCode"]) == ("helper", "BLOCK", None)
    assert entry["url"].endswith("/secret") and target.received == []
    # Cost: 25 cents per run; the fee is 10% rounded half up (3), the builder gets the rest.
    assert body["cost"] == {
        "pricingModel": "per_run",
        "priceUsdCents": 25,
        "billedTokens": 310 + 64,
        "amountCents": 25,
        "envelopeFeePercent": 10,
        "envelopeFeeCents": 3,
        "builderAmountCents": 22,
    }
    assert body["callback"] is None

    # The builder sees the same run without the deployer's task and response.
    seen = await detail(client, builder_key, install_id, outcome["runId"])
    assert seen["view"] == "builder"
    assert seen["task"] is None and seen["response"] is None
    assert seen["steps"] == body["steps"] and seen["cost"] == body["cost"]
    assert seen["security"] == body["security"]


async def test_a_failed_run_costs_nothing_and_says_why(make_client, aiohttp_server):
    client, llm = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await deal(client)
    llm.fail_next(10, status=503)
    response = await client.post(f"/api/installs/{install_id}/run", json={"task": "t"}, headers=key)
    outcome = await response.json()
    assert outcome["status"] == "failed"
    body = await detail(client, key, install_id, outcome["runId"])
    assert body["status"] == "failed" and "Model provider error" in body["errorMessage"]
    assert body["steps"][0]["error"] and body["steps"][0]["status"] == "failed"
    assert body["cost"]["amountCents"] == 0 and body["response"] is None


async def test_unknown_runs_and_other_tenants_get_404(make_client, aiohttp_server):
    client, llm = await managed_client(make_client, aiohttp_server)
    builder_key, key, install_id = await deal(client)
    _, other_key, other_install = await deal(client)
    run_id = (await delegated_run(client, llm, key, install_id, "http://allowed.example.com/"))["runId"]
    stranger = bearer(await create_key(client, await signup(client)))
    assert (await detail(client, key, install_id, uuid.uuid4().hex, 404)) == {"error": "Run not found"}
    # The run through another install's path (owned by its caller) and another tenant's key.
    assert (await detail(client, other_key, other_install, run_id, 404)) == {"error": "Run not found"}
    assert (await detail(client, other_key, install_id, run_id, 404)) == {"error": "Install not found"}
    assert (await detail(client, stranger, install_id, run_id, 404)) == {"error": "Install not found"}
    # The builder of another template is a stranger here too.
    assert (await detail(client, builder_key, other_install, run_id, 404))["error"]


async def test_a_reported_run_has_nulls_where_its_platform_cannot_say(make_client, aiohttp_server):
    """A run another platform reported (orchA, through its install token) has its record only."""
    client, _ = await managed_client(make_client, aiohttp_server)
    paperclip = await start_paperclip(aiohttp_server)
    builder = await signup(client)
    builder_key = await create_key(client, builder)
    template = await publish_template(
        client, builder_key, definition=TEAM, pricingModel="per_run", priceUsdCents=25
    )
    deployer = await signup(client)
    key = await create_key(client, deployer)
    install, token = await orch_a_install(client, key, paperclip, template["id"])
    install_id = install["installId"]
    agent = next(a["externalId"] for a in install["deployedAgents"] if a["key"] == "lead")
    run_id = uuid.uuid4().hex
    report = ingest_body(agent, runId=run_id, inputTokens=7, outputTokens=3)
    response = await ingest(client, token, report)
    assert response.status == 200, await response.text()
    body = await detail(client, bearer(key), install_id, run_id)
    assert body["status"] == "completed" and body["agent"] == "lead"
    assert body["startedAt"] is None and body["durationMs"] is None and body["task"] is None
    [step] = body["steps"]
    assert (step["agent"], step["iterations"], step["inputTokens"], step["durationMs"]) == (
        "lead",
        None,
        7,
        None,
    )
    assert body["security"] == [] and body["cost"]["amountCents"] == 25


async def test_the_callback_delivery_record_is_shown_and_its_url_only_to_the_deployer(
    make_client, aiohttp_server, store
):
    client, llm = await managed_client(make_client, aiohttp_server)
    builder_key, key, install_id = await deal(client)
    run_id = (await delegated_run(client, llm, key, install_id, "http://allowed.example.com/"))["runId"]
    # The record the durable callback delivery keeps (svc/runtime/callbacks.py, written there and
    # only read here), in its documented shape.
    first, second = datetime(2026, 11, 24, 0, 0, 1, tzinfo=UTC), datetime(2026, 11, 24, 0, 0, 3, tzinfo=UTC)
    await store["callbacks"].insert_one(
        {
            "_id": run_id,
            "installId": install_id,
            "url": "https://hooks.example.com/done?token=abc",
            "status": "delivered",
            "attempts": [
                {"at": first, "status": 503, "latencyMs": 12, "error": "HTTP 503"},
                {"at": second, "status": 200, "latencyMs": 9, "error": None},
            ],
            "nextAttemptAt": None,
            "createdAt": first,
        }
    )
    body = await detail(client, key, install_id, run_id)
    assert body["callback"] == {
        "url": "https://hooks.example.com/done?token=abc",
        "status": "delivered",
        "attempts": [
            {"at": "2026-11-24T00:00:01.000Z", "status": 503, "latencyMs": 12, "error": "HTTP 503"},
            {"at": "2026-11-24T00:00:03.000Z", "status": 200, "latencyMs": 9, "error": None},
        ],
        "nextAttemptAt": None,
        "createdAt": "2026-11-24T00:00:01.000Z",
    }
    seen = await detail(client, builder_key, install_id, run_id)
    assert seen["callback"] == {**body["callback"], "url": None}


def test_every_reader_of_the_security_log_follows_its_one_definition():
    """The entry's fields are defined once (svc/runtime/security_log.py): the install's log, the
    run detail and both response models follow it, an approval (MCP) included."""
    record = McpCallRecord(
        installId="i-1",
        agentKey="lead",
        agentName="Lead",
        runId="r-1",
        method="MCP",
        url="mcp://docs/search",
        hostname="docs",
        path="/search",
        decision="ALLOW",
        decisionSource="approval",
        reason=None,
        judgeReasoning=None,
        judgeConfidence=None,
        statusCode=200,
        latencyMs=12,
        mcp={"server": "docs", "tool": "search", "verdict": "approved"},
    )
    at = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    shown = security_entry({"securityId": "s-1", "at": at, "security": asdict(record)})
    assert list(shown) == ["id", *RUN_SECURITY_FIELDS, "createdAt"]
    assert list(RunSecurityEntry.model_fields) == list(shown)
    assert RunSecurityEntry.model_validate(shown).model_dump()["decisionSource"] == "approval"
    stored = {k: v for k, v in asdict(record).items() if k != "installId"}
    assert list(SecurityRequest.model_fields) == ["id", *SECURITY_FIELDS, "createdAt"]
    SecurityRequest.model_validate({"id": "s-1", **stored, "createdAt": shown["createdAt"]})
    # An HTTP request's entry has no MCP fields: the models take it as it is stored.
    http = {k: v for k, v in stored.items() if k not in ("kind", "mcp")}
    SecurityRequest.model_validate(
        {"id": "s-2", **http, "decisionSource": "rule", "createdAt": shown["createdAt"]}
    )
