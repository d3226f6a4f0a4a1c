"""Org analytics: windows (free 30 days, Pro 365, wider ones clamped), zero-filled days, per template."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from svc.core.clock import iso, utcnow
from svc.installs import InstallReads
from svc.runs.runs import Runs
from svc.runtime import RuntimeReads
from tests.support.accounts import app_store, bearer
from tests.support.installs import install_ok
from tests.support.orgs import make_pro, ok, org_key, send, world
from tests.support.runs import ingest, ingest_body, orch_a_install, start_paperclip
from tests.support.runtime import managed_client, member
from tests.support.templates import publish_template
from tests.support.waiting import wait_settled


def parse(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


async def org_template(client: Any, key: str, name: str, **definition: Any) -> dict[str, Any]:
    team = {"version": "v1", "agents": [member("a"), member("b")], **definition}
    return await publish_template(client, key, name=name, visibility="team", definition=team)


@dataclass
class Reporting:
    """An orchA install of a team template, and what its agents report with."""

    install_id: str
    template_id: str
    token: str
    agent_a: str  # agent a's Paperclip id


async def reporting_install(client: Any, key: str, paperclip: Any, name: str) -> Reporting:
    template = await org_template(client, key, name)
    install, token = await orch_a_install(client, key, paperclip, template["id"])
    agent_a = next(a["externalId"] for a in install["deployedAgents"] if a["key"] == "a")
    return Reporting(install["installId"], template["id"], token, agent_a)


async def report(client: Any, install: Reporting, status: str) -> None:
    """A run recorded through the API (stamped now), as Paperclip's reporter posts it."""
    body = ingest_body(install.agent_a, runId=uuid.uuid4().hex, status=status, inputTokens=1, outputTokens=1)
    await ok(await ingest(client, install.token, body))


async def pipeline_run(client: Any, key: str, llm: Any, name: str) -> str:
    """A pipeline (a team with a gate) on the managed runtime, and one real run of it to its end,
    recorded by the runtime (it takes no reports); the install id."""
    template = await org_template(client, key, name, gates=[{"name": "review", "after": "a"}])
    install_id = (await install_ok(client, key, templateId=template["id"], platform="svc"))["installId"]
    llm.script(text="drafted").script(text="sent")
    run = await ok(
        await client.post(f"/api/installs/{install_id}/run", json={"task": "go"}, headers=bearer(key))
    )
    assert run["pausedAtGate"] == "review", run
    await ok(await client.post(f"/api/installs/{install_id}/continue", json={}, headers=bearer(key)))
    await wait_settled(app_store(client), run["runId"])
    return str(install_id)


async def backdate(client: Any, install_id: str, days: int, status: str = "completed") -> None:
    """A run recorded `days` ago (the run API always stamps now, so older runs are written directly)."""
    store = app_store(client)
    install = await store.installs.find_one({"_id": install_id})
    runs = Runs(store, installs=InstallReads(store), runtime=RuntimeReads(store))
    await runs.record(  # the service's write path, which also keeps the counters
        install, agent_key="a", status=status, source="seed", created_at=utcnow() - timedelta(days=days)
    )


async def test_free_org_defaults_zero_fill_and_clamping(make_client, aiohttp_server):
    # Team runs come from orchA installs (reported through the install token); the pipeline's
    # run is a real run of the managed runtime, which records it itself.
    client, llm = await managed_client(make_client, aiohttp_server)
    paperclip = await start_paperclip(aiohttp_server)
    w = await world(client)
    key = await org_key(client, w.owner, w.slug)
    team = await reporting_install(client, key, paperclip, "Support Team")
    template_id = team.template_id
    pipeline_id = await pipeline_run(client, key, llm, "Outreach")
    await report(client, team, "completed")
    await report(client, team, "failed")
    await backdate(client, team.install_id, 3)
    await backdate(client, team.install_id, 60)  # outside what a free org may see
    # Runs of someone else's install never count.
    other = await world(client)
    other_key = await org_key(client, other.owner, other.slug)
    await report(client, await reporting_install(client, other_key, paperclip, "Theirs"), "completed")

    body = await ok(await send(client, w.member, "GET", f"{w.base}/analytics"))
    assert (body["isPro"], body["maxDays"], body["totalRuns"], body["successRate"]) == (False, 30, 4, 75.0)
    start, end = parse(body["fromDate"]), parse(body["toDate"])
    assert end - start == timedelta(days=30) and abs((utcnow() - end).total_seconds()) < 60
    assert len(body["byDay"]) == 31
    assert [d["date"] for d in body["byDay"]] == sorted(d["date"] for d in body["byDay"])
    today, three_ago = utcnow().date().isoformat(), (utcnow() - timedelta(days=3)).date().isoformat()
    days = {d["date"]: (d["total"], d["success"]) for d in body["byDay"]}
    assert days[today] == (3, 2) and days[three_ago] == (1, 1)
    assert sum(t for t, _ in days.values()) == 4 and list(days.values()).count((0, 0)) == 29
    assert body["byTemplate"] == [
        {"templateId": template_id, "name": "Support Team", "total": 3, "success": 2},
        {"templateId": f"pipeline:{pipeline_id}:Outreach", "name": "Outreach", "total": 1, "success": 1},
    ]

    # A wider window is clamped to 30 days: the 60-day-old run stays out.
    wide = await ok(
        await send(client, w.member, "GET", f"{w.base}/analytics?from={iso(utcnow() - timedelta(days=90))}")
    )
    assert parse(wide["toDate"]) - parse(wide["fromDate"]) == timedelta(days=30)
    assert wide["totalRuns"] == 4

    # Pro: up to 365 days.
    await make_pro(client, w.org["id"])
    pro = await ok(
        await send(client, w.member, "GET", f"{w.base}/analytics?from={iso(utcnow() - timedelta(days=400))}")
    )
    assert (pro["isPro"], pro["maxDays"], pro["totalRuns"]) == (True, 365, 5)
    assert parse(pro["toDate"]) - parse(pro["fromDate"]) == timedelta(days=365)
    assert len(pro["byDay"]) == 366


async def test_explicit_windows_and_bad_values(make_client):
    client = await make_client(rate_limit_multiplier=None)
    w = await world(client)
    path = f"{w.base}/analytics"
    body = await ok(
        await send(client, w.member, "GET", f"{path}?from=2026-01-01T00:00:00Z&to=2026-01-03T12:00:00Z")
    )
    assert (body["fromDate"], body["toDate"]) == ("2026-01-01T00:00:00.000Z", "2026-01-03T12:00:00.000Z")
    assert body["byDay"] == [
        {"date": "2026-01-01", "total": 0, "success": 0},
        {"date": "2026-01-02", "total": 0, "success": 0},
        {"date": "2026-01-03", "total": 0, "success": 0},
    ]
    assert body["totalRuns"] == 0 and body["successRate"] is None and body["byTemplate"] == []
    for bad in ("from=soon", "to=2026-02-30", "from=2026-01-05T00:00:00Z&to=2026-01-01T00:00:00Z"):
        response = await send(client, w.member, "GET", f"{path}?{bad}")
        assert response.status == 400, bad
    naive = await ok(
        await send(client, w.member, "GET", f"{path}?from=2026-01-01T00:00:00&to=2026-01-02T00:00:00")
    )
    assert naive["fromDate"] == "2026-01-01T00:00:00.000Z", "a time without an offset is UTC"
