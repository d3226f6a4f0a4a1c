"""GET /api/runs: totals, breakdowns, the run list, limits and tenant isolation, over HTTP."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from svc.runs import rebuild_run_stats
from svc.runs.run_analytics import RunsReport
from tests.support.accounts import bearer
from tests.support.runs import ingest, ingest_body, orch_a_install, paid_template, start_paperclip
from tests.support.runtime import managed_client, member, start_target, svc_install
from tests.support.templates import user_with_key
from tests.support.waiting import wait_settled

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
async def client(make_client):
    return await make_client(rate_limit_multiplier=None)


async def seed_runs(store, template_id: str, rows: list[tuple[str, str | None, str, int | None, int | None]]):
    """Run records as Runs.add writes them: (platform, agentKey, status, inputTokens, outputTokens),
    the first row newest. Returns the run ids, newest first."""
    docs = []
    for i, (platform, agent_key, status, tokens_in, tokens_out) in enumerate(rows):
        docs.append(
            {
                "_id": uuid.uuid4().hex[:24],
                "runId": uuid.uuid4().hex,
                "installId": f"inst-{platform}",
                "templateId": template_id,
                "templateVersion": 1,
                "platform": platform,
                "owner": {"kind": "user", "id": "seed"},
                "agentKey": agent_key,
                "platformAgentId": None,
                "status": status,
                "inputTokens": tokens_in,
                "outputTokens": tokens_out,
                "errorMessage": "boom" if status == "failed" else None,
                "source": "seed",
                "createdAt": NOW - timedelta(minutes=i),
            }
        )
    if docs:
        await store["runs"].insert_many(docs)
        # Seeding bypasses Runs.add, so the hourly counters are rebuilt as an operator would.
        await rebuild_run_stats(store, {"templateId": template_id})
    return [d["_id"] for d in docs]


async def get_runs(client, key: str, **query: Any):
    """GET /api/runs; returns the response."""
    return await client.get("/api/runs", params={k: str(v) for k, v in query.items()}, headers=bearer(key))


async def runs_ok(client, key: str, **query: Any) -> dict[str, Any]:
    """GET /api/runs, asserting 200 and the documented shape."""
    response = await get_runs(client, key, **query)
    assert response.status == 200, await response.text()
    body = await response.json()
    RunsReport.model_validate(body)
    assert set(body) == {"summary", "byPlatform", "byAgent", "runs"}
    return dict(body)


ROWS = [
    ("orchA", "lead", "completed", 100, 10),
    ("orchA", "writer", "failed", 50, 5),
    ("orchB", "lead", "completed", None, None),
    ("orchB", "lead", "failed", None, None),
    ("orchB", "writer", "completed", None, None),
    ("svc", "writer", "completed", 30, None),
    ("svc", None, "completed", 0, 0),
    ("orchA", "lead", "completed", 200, 20),
]


async def test_numbers_cover_all_runs(client, store):
    _, key = await user_with_key(client)
    template = await paid_template(client, key)
    other = await paid_template(client, key)
    ids = await seed_runs(store, template["id"], ROWS)
    await seed_runs(store, other["id"], [("orchA", "lead", "failed", 999, 999)])

    body = await runs_ok(client, key, templateId=template["id"], limit=3)

    assert body["summary"] == {
        "totalRuns": 8,
        "failedRuns": 2,
        "successRate": 75.0,
        "totalInputTokens": 380,
        "totalOutputTokens": 35,
        "totalToolCalls": 0,
        "failedToolCalls": 0,
    }
    assert body["byPlatform"] == [
        {
            "platform": "orchA",
            "totalRuns": 3,
            "failedRuns": 1,
            "inputTokens": 350,
            "outputTokens": 35,
            "hasTokens": True,
        },
        {
            "platform": "orchB",
            "totalRuns": 3,
            "failedRuns": 1,
            "inputTokens": 0,
            "outputTokens": 0,
            "hasTokens": False,
        },
        {
            "platform": "svc",
            "totalRuns": 2,
            "failedRuns": 0,
            "inputTokens": 30,
            "outputTokens": 0,
            "hasTokens": True,
        },
    ]
    assert body["byAgent"] == [
        {"agentKey": "lead", "runs": 4, "failed": 1, "inputTokens": 300, "outputTokens": 30},
        {"agentKey": "writer", "runs": 3, "failed": 1, "inputTokens": 80, "outputTokens": 5},
        {"agentKey": None, "runs": 1, "failed": 0, "inputTokens": 0, "outputTokens": 0},
    ]
    assert [run["id"] for run in body["runs"]] == ids[:3], "newest first, limited"
    assert body["runs"][1] == {
        "id": ids[1],
        "installId": "inst-orchA",
        "platform": "orchA",
        "agentKey": "writer",
        "status": "failed",
        "inputTokens": 50,
        "outputTokens": 5,
        "errorMessage": "boom",
        "createdAt": "2026-05-01T11:59:00.000Z",
    }


async def test_success_rate_is_null_without_runs(client):
    _, key = await user_with_key(client)
    template = await paid_template(client, key)
    body = await runs_ok(client, key, templateId=template["id"])
    assert body == {
        "summary": {
            "totalRuns": 0,
            "failedRuns": 0,
            "successRate": None,
            "totalInputTokens": 0,
            "totalOutputTokens": 0,
            "totalToolCalls": 0,
            "failedToolCalls": 0,
        },
        "byPlatform": [],
        "byAgent": [],
        "runs": [],
    }


async def test_success_rate_is_a_percentage(client, store):
    _, key = await user_with_key(client)
    template = await paid_template(client, key)
    await seed_runs(
        store, template["id"], [("svc", "lead", "completed", 1, 1)] * 2 + [("svc", "lead", "failed", 1, 1)]
    )
    assert (await runs_ok(client, key, templateId=template["id"]))["summary"]["successRate"] == 66.67
    only_failed = await paid_template(client, key)
    await seed_runs(store, only_failed["id"], [("svc", "lead", "failed", 1, 1)])
    assert (await runs_ok(client, key, templateId=only_failed["id"]))["summary"]["successRate"] == 0


async def test_reported_runs_show_up(client, aiohttp_server):
    """End to end: runs pushed through the ingest endpoint are what the owner reads back."""
    paperclip = await start_paperclip(aiohttp_server)
    _, key = await user_with_key(client)
    template = await paid_template(client, key)
    install, token = await orch_a_install(client, key, paperclip, template["id"])
    lead = install["deployedAgents"][0]["externalId"]
    for i, status in enumerate(["completed", "failed", "completed"]):
        assert (await ingest(client, token, ingest_body(lead, runId=f"r{i}", status=status))).status == 200
    assert (await ingest(client, token, ingest_body(lead, runId="r0"))).status == 200  # a repeat

    body = await runs_ok(client, key, templateSlug=template["slug"])
    assert body["summary"]["totalRuns"] == 3 and body["summary"]["failedRuns"] == 1
    assert body["summary"]["totalInputTokens"] == 300
    assert {run["installId"] for run in body["runs"]} == {install["installId"]}
    assert [run["agentKey"] for run in body["runs"]] == ["lead"] * 3


async def test_limit_defaults_to_100_and_is_bounded(client, store):
    _, key = await user_with_key(client)
    template = await paid_template(client, key)
    await seed_runs(store, template["id"], [("svc", "lead", "completed", 1, 1)] * 520)

    default = await runs_ok(client, key, templateId=template["id"])
    assert len(default["runs"]) == 100 and default["summary"]["totalRuns"] == 520
    assert len((await runs_ok(client, key, templateId=template["id"], limit=500))["runs"]) == 500
    assert len((await runs_ok(client, key, templateId=template["id"], limit=1))["runs"]) == 1
    for bad in (0, 501, -1, "ten", 2.5, ""):
        response = await get_runs(client, key, templateId=template["id"], limit=bad)
        assert response.status == 400, bad
        assert "limit" in (await response.json())["error"]


async def test_template_is_required(client):
    _, key = await user_with_key(client)
    for query in ({}, {"limit": 10}):
        response = await get_runs(client, key, **query)
        assert response.status == 400
        assert await response.json() == {"error": "templateId or templateSlug is required"}


async def test_slug_and_id_name_the_same_template(client, store):
    _, key = await user_with_key(client)
    template = await paid_template(client, key)
    other = await paid_template(client, key)
    await seed_runs(store, template["id"], ROWS)
    by_id = await runs_ok(client, key, templateId=template["id"])
    assert await runs_ok(client, key, templateSlug=template["slug"]) == by_id
    assert await runs_ok(client, key, templateId=template["id"], templateSlug=template["slug"]) == by_id
    mismatch = await get_runs(client, key, templateId=template["id"], templateSlug=other["slug"])
    assert mismatch.status == 404


async def test_another_tenant_gets_404(client, store):
    _, key = await user_with_key(client)
    _, stranger = await user_with_key(client)
    template = await paid_template(client, key)  # public and published: listed to everyone
    await seed_runs(store, template["id"], ROWS)

    answers = [
        await get_runs(client, stranger, templateId=template["id"]),
        await get_runs(client, stranger, templateSlug=template["slug"]),
        await get_runs(client, stranger, templateId="no-such-template"),
        await get_runs(client, stranger, templateSlug="no-such-slug"),
    ]
    assert [r.status for r in answers] == [404] * 4
    bodies = [await r.json() for r in answers]
    assert all(b == bodies[0] for b in bodies), "a stranger cannot tell existing from missing"


async def test_needs_an_api_key(client):
    _, key = await user_with_key(client)
    template = await paid_template(client, key)
    assert (await client.get("/api/runs", params={"templateId": template["id"]})).status == 401
    invalid = await client.get(
        "/api/runs", params={"templateId": template["id"]}, headers=bearer("svc_live_" + "0" * 32)
    )
    assert invalid.status == 401 and (await invalid.json())["error"] == "Invalid API key"


async def test_tool_calls_are_counted_once_each_run_is_settled(make_client, aiohttp_server, store):
    """An agent's outbound calls count as tool calls of its template once the run's settlement
    stores them; a call that got no answer (blocked, unreachable) or a 400+ status failed."""
    client, llm = await managed_client(make_client, aiohttp_server)
    target = await start_target(aiohttp_server)
    policy = {
        "accessPolicyVersion": "1",
        "rules": [{"match": {"host": "blocked.example.com"}, "action": "deny"}],
    }
    _, key, install_id = await svc_install(client, [member("lead", accessPolicy=policy)])
    _, other_key, other_install = await svc_install(client, [member("lead")])

    def calls(*urls: str) -> None:
        llm.script(
            tool_calls=[{"name": "http_request", "arguments": {"method": "GET", "url": u}} for u in urls]
        )
        llm.script(text="done")

    calls(f"{target.base}/ok", "http://blocked.example.com/x", "http://127.0.0.1:9/closed")
    first = await (
        await client.post(f"/api/installs/{install_id}/run", json={"task": "a"}, headers=key)
    ).json()
    calls(f"{target.base}/again")
    second = await (
        await client.post(f"/api/installs/{install_id}/run", json={"task": "b"}, headers=key)
    ).json()
    calls(f"{target.base}/elsewhere")  # another template's install
    await client.post(f"/api/installs/{other_install}/run", json={"task": "c"}, headers=other_key)
    for run in (first, second):
        await wait_settled(store, run["runId"])
    template_id = (await store.installs.find_one({"_id": install_id}))["templateId"]
    summary = (await runs_ok(client, key["Authorization"][7:], templateId=template_id))["summary"]
    assert (summary["totalToolCalls"], summary["failedToolCalls"]) == (4, 2)
