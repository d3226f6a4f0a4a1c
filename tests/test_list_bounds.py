"""Newest-first feeds read in time windows (svc/core/windows.py) and the run-log's incremental
tally (svc/runtime/daily_step_counts.py) answer exactly what the unbounded queries answer.

The records are seeded straight into the database with the times that stress the windows:
a burst in the last second, ties on one instant (ordered by id), a record stamped a moment
in the future, a sparse tail over weeks, and records just outside the floor. Each answer is
compared with the plain sorted query, twice (the second read starts from the span the
first one remembered). The cost of these routes is measured by bench/lists.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import time_machine
from pymongo import DESCENDING

from svc.core import iso, new_id, utcnow
from svc.runtime import daily_step_counts
from tests.support.accounts import signup
from tests.support.installs import mine
from tests.support.orgs import create_org, make_pro
from tests.support.runtime import managed_client, member, svc_install

ORDER = [("createdAt", DESCENDING), ("_id", DESCENDING)]


def moments(now: datetime) -> list[datetime]:
    """Times that make the windows work: burst, ties, future, gaps, a tail over weeks."""
    out = [now - timedelta(milliseconds=7 * n) for n in range(40)]  # a burst in the last 0.3 s
    out += [now + timedelta(seconds=1)]  # a clock slightly ahead
    out += [now - timedelta(hours=3)] * 30  # ties: ordered by _id
    out += [now - timedelta(minutes=n * 17 + 1) for n in range(60)]
    out += [now - timedelta(days=n, hours=5) for n in range(1, 26)]
    return out


def event(install_id: str, at: datetime, n: int) -> dict[str, Any]:
    kind = "step_failed" if n % 3 == 0 else "step_completed"
    return {
        "_id": new_id(),
        "installId": install_id,
        "eventType": kind,
        "stepKey": "lead",
        "gateName": None,
        "actorId": None,
        "actorEmail": None,
        "meta": {"n": n},
        "createdAt": at,
    }


async def expected(store: Any, collection: str, match: dict[str, Any], count: int) -> list[str]:
    docs = await store[collection].find(match, {"_id": 1}).sort(ORDER).to_list(count)
    return [d["_id"] for d in docs]


async def test_feeds_answer_the_newest_records_exactly(make_client, aiohttp_server, store):
    client, _ = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await svc_install(client, [member("lead")])
    _, _, other_id = await svc_install(client, [member("lead")])
    now = utcnow()
    times = moments(now)
    # Installed before its oldest record (the feeds look back no further than the install).
    await store.installs.update_many({}, {"$set": {"createdAt": now - timedelta(days=60)}})
    await store["pipeline_events"].insert_many(
        [event(install_id, at, n) for n, at in enumerate(times)]
        + [event(other_id, at, n) for n, at in enumerate(times[:50])]
    )
    agent_runs = [
        {
            "_id": new_id(),
            "installId": install_id,
            "agentKey": "lead",
            "runId": f"run-{n}",
            "status": "completed",
            "inputTokens": n,
            "outputTokens": 1,
            "errorMessage": None,
            "createdAt": at,
        }
        for n, at in enumerate(times)
    ]
    await store["agent_runs"].insert_many(agent_runs)
    requests = [
        {
            "_id": new_id(),
            "installId": install_id,
            "agentKey": "lead",
            "agentName": "Lead",
            "runId": f"run-{n}",
            "method": "GET",
            "url": "https://example.com/",
            "hostname": "example.com",
            "path": "/",
            "decision": "ALLOW",
            "decisionSource": "rule",
            "reason": None,
            "judgeReasoning": None,
            "judgeConfidence": None,
            "statusCode": 200,
            "latencyMs": n,
            "reportOnly": False,
            "createdAt": at,
        }
        for n, at in enumerate(times * 2)  # 350: more than the 200 listed, all within 30 days
    ]
    await store["security_requests"].insert_many(requests)
    mine = {"installId": install_id}
    for _ in range(2):
        events = await (await client.get(f"/api/installs/{install_id}/events", headers=key)).json()
        assert [e["id"] for e in events["events"]] == await expected(store, "pipeline_events", mine, 100)
        for limit in (1, 7, 41, 120, 200):
            reply = await client.get(f"/api/installs/{install_id}/agent-runs?limit={limit}", headers=key)
            runs = (await reply.json())["runs"]
            assert len(runs) == min(limit, len(times))
            assert [r["id"] for r in runs] == await expected(store, "agent_runs", mine, limit)
        reply = await client.get(f"/api/installs/{install_id}/security/requests", headers=key)
        logged = (await reply.json())["requests"]
        assert len(logged) == 200
        assert [r["id"] for r in logged] == await expected(store, "security_requests", mine, 200)


async def test_a_feed_with_few_old_records_lists_them_all(make_client, aiohttp_server, store):
    client, _ = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await svc_install(client, [member("lead")])
    install = await store.installs.find_one({"_id": install_id})
    # Older than the install by less than the clock slack the feeds allow: still listed.
    born = install["createdAt"].astimezone(UTC)
    times = [born - timedelta(seconds=30), born + timedelta(seconds=1), born + timedelta(minutes=5)]
    await store["pipeline_events"].insert_many([event(install_id, at, n) for n, at in enumerate(times)])
    events = await (await client.get(f"/api/installs/{install_id}/events", headers=key)).json()
    assert [e["meta"]["n"] for e in events["events"]] == [2, 1, 0]


async def test_run_log_counts_stay_exact_as_events_arrive(make_client, aiohttp_server, store):
    client, _ = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await svc_install(client, [member("lead")])
    now = utcnow()

    async def check() -> None:
        log = (await (await client.get(f"/api/installs/{install_id}/run-log?days=30", headers=key)).json())[
            "days"
        ]
        counted = {d["date"]: (d["ok"], d["error"]) for d in log}
        want: dict[str, list[int]] = {d: [0, 0] for d in counted}
        steps = {"installId": install_id, "eventType": {"$in": ["step_completed", "step_failed"]}}
        async for doc in store["pipeline_events"].find(steps):
            day = doc["createdAt"].astimezone(UTC).date().isoformat()
            if day in want:
                want[day][0 if doc["eventType"] == "step_completed" else 1] += 1
        assert counted == {d: tuple(v) for d, v in want.items()}

    seeded = [event(install_id, at, n) for n, at in enumerate(moments(now))]
    seeded.append({**event(install_id, now - timedelta(days=40), 1)})  # outside the 30 days
    seeded.append({**event(install_id, now - timedelta(minutes=1), 1), "eventType": "gate_triggered"})
    await store["pipeline_events"].insert_many(seeded)
    await check()
    await check()  # from the tally
    # Arriving later, stamped as they are written (one a moment before: still in flight).
    written = utcnow()
    later = [written - timedelta(seconds=2), written, written]
    await store["pipeline_events"].insert_many([event(install_id, at, n) for n, at in enumerate(later)])
    await check()  # the new ones are not settled yet: read as the live part

    # Once they are SETTLE old: this process's clock (the app's) moves past it instead of the test
    # waiting 10 s.
    with time_machine.travel(written + daily_step_counts.SETTLE + timedelta(seconds=1), tick=True):
        assert utcnow() - written > daily_step_counts.SETTLE
        await check()  # now added to the tally
        await check()


async def test_audit_log_pages_match_the_plain_query(make_client, aiohttp_server, store):
    client = await make_client()
    owner = await signup(client)
    org = await create_org(client, owner)
    await make_pro(client, org["id"])
    now = utcnow()
    times = moments(now)
    # Made before its oldest event (the log looks back no further than the org's creation).
    await store.orgs.update_one({"_id": org["id"]}, {"$set": {"createdAt": now - timedelta(days=60)}})
    await store["org_audit"].insert_many(
        [
            {
                "_id": new_id(),
                "orgId": org["id"],
                "actorId": None,
                "actorEmail": None,
                "action": "org.settings_changed",
                "meta": {"n": n},
                "createdAt": at,
            }
            for n, at in enumerate(times)
        ]
    )
    total = await store["org_audit"].count_documents({"orgId": org["id"]})
    windows = [
        (None, None),
        (now - timedelta(hours=3), now),  # both ends inclusive: the 30 ties at -3 h are in
        (now - timedelta(days=10), now - timedelta(hours=3)),
        (now - timedelta(days=60), None),
    ]
    for start, end in windows:
        match: dict[str, Any] = {"orgId": org["id"]}
        bounds = {}
        if start is not None:
            bounds["$gte"] = start
        if end is not None:
            bounds["$lte"] = end
        if bounds:
            match["createdAt"] = bounds
        query = "".join(
            f"&{name}={iso(value)}" for name, value in (("from", start), ("to", end)) if value is not None
        )
        for limit, pages in ((100, 3), (7, 4), (50, 2)):
            for page in range(1, pages + 1):
                path = f"/api/orgs/{org['slug']}/audit-log?page={page}&limit={limit}{query}"
                reply = await client.get(path, headers=owner.cookie)
                assert reply.status == 200, await reply.text()
                got = [e["id"] for e in (await reply.json())["events"]]
                docs = (
                    await store["org_audit"]
                    .find(match, {"_id": 1})
                    .sort(ORDER)
                    .skip((page - 1) * limit)
                    .limit(limit)
                    .to_list(None)
                )
                assert got == [d["_id"] for d in docs], (start, end, limit, page)
                assert len(got) <= limit
    assert total > 100


async def test_installs_mine_lists_the_callers_managed_installs_only(make_client, aiohttp_server, store):
    client, _ = await managed_client(make_client, aiohttp_server)
    caller, _, first = await svc_install(client, [member("lead")])
    org = await create_org(client, caller)
    doc = await store.installs.find_one({"_id": first})
    now = utcnow()

    def copy(**fields: Any) -> dict[str, Any]:
        return {**doc, "_id": new_id(), "webhookTokenHash": None, **fields}

    await store.installs.insert_many(
        [
            copy(createdAt=now - timedelta(minutes=5)),  # the caller's, older
            copy(createdAt=now + timedelta(seconds=1), owner={"kind": "org", "id": org["id"]}),  # via the org
            copy(createdAt=now, status="pending"),  # provisioning: not listed
            copy(createdAt=now, status="pending", approval="pending"),  # awaiting governance: listed
            copy(createdAt=now, platform="orchA"),  # not managed: not listed
            copy(createdAt=now, owner={"kind": "org", "id": "another-org"}),  # not the caller's org
        ]
        + [copy(createdAt=now, owner={"kind": "user", "id": f"someone-{n}"}) for n in range(30)]
    )
    reachable = [
        {"owner.kind": "user", "owner.id": doc["owner"]["id"]},
        {"owner.kind": "org", "owner.id": org["id"]},
    ]
    everything = await store.installs.find({"$or": reachable}).to_list(None)
    want = sorted(
        (
            d
            for d in everything
            if d["platform"] == "svc" and (d["status"] != "pending" or d.get("approval") == "pending")
        ),
        key=lambda d: d["createdAt"],
        reverse=True,
    )
    listed = await mine(client, caller)
    assert [item["id"] for item in listed] == [d["_id"] for d in want]
    assert len(listed) == 4
