"""List and analytics routes as the data grows: one client, p50/p99 at 2,000 and 20,000 records.

    .venv/bin/python bench/lists.py [--sizes 2000,20000] [--requests 20]

Starts `svc serve` (embedded database) as a user would, makes a user with a managed
install of a published template and a Pro org, then for each size seeds, straight
into the database, that many records for the measured owner, all within the last
hour (the worst case for a look-up by recency): pipeline events (half of them step
events), agent steps, security-log entries, org audit events, runs (half the
template's install's, half an org install's, with their counters rebuilt), and
installs of other users (what `installs/mine` must not read). Then it times each
route, one request at a time. Issue 22's aim: the cost depends on the limit (and
on installs and agents), not on the number of records or how recent they are, so
the 20,000 column should be close to the 2,000 one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).parent.parent))
sys.path.insert(0, str(Path(__file__).parent))
from harness import percentile, running_service  # bench/harness.py

from svc.core import Store, new_id, utcnow
from svc.runs import rebuild_run_stats
from svc.subprocesses.embedded_db import STATE_FILE, uri_for

BATCH = 2_000
AGENTS = [{"key": "lead", "name": "Lead", "model": "providerA:small", "prompt": "Lead."}]


async def call(session: aiohttp.ClientSession, method: str, url: str, **kwargs: Any) -> Any:
    async with session.request(method, url, **kwargs) as reply:
        if reply.status >= 300:
            raise RuntimeError(f"{method} {url}: {reply.status} {await reply.text()}")
        return await reply.json(content_type=None)


async def setup(session: aiohttp.ClientSession, base: str, store: Store) -> dict[str, str]:
    """A user with a key, a published template, a managed install of it and a Pro org."""
    body = {"email": "lists@example.com", "password": "lists-password", "name": "Lists"}
    async with session.post(f"{base}/api/auth/signup", json=body) as reply:
        cookie = f"svc_session={reply.cookies['svc_session'].value}"
    headers = {"Cookie": cookie}
    key = (await call(session, "POST", f"{base}/api/auth/keys", json={}, headers=headers))["key"]
    auth = {"Authorization": f"Bearer {key}"}
    definition = {"agents": AGENTS}
    template = await call(
        session,
        "POST",
        f"{base}/api/templates",
        json={"slug": "lists", "name": "Lists", "visibility": "public", "definition": definition},
        headers=auth,
    )
    await call(session, "POST", f"{base}/api/templates/{template['id']}/publish", json={}, headers=auth)
    made = await call(
        session,
        "POST",
        f"{base}/api/installs",
        json={"templateId": template["id"], "platform": "svc"},
        headers=auth,
    )
    org = (await call(session, "POST", f"{base}/api/orgs", json={"name": "Lists Org"}, headers=headers))[
        "org"
    ]
    # Seeding, as the payment webhook would after a subscription (bench only).
    await store.orgs.update_one({"_id": org["id"]}, {"$set": {"plan": "pro"}})
    back = utcnow() - timedelta(days=1)  # made before every seeded record
    await store.orgs.update_one({"_id": org["id"]}, {"$set": {"createdAt": back}})
    await store.installs.update_one({"_id": made["installId"]}, {"$set": {"createdAt": back}})
    return {
        "cookie": cookie,
        "key": key,
        "template": template["id"],
        "install": made["installId"],
        "org": org["id"],
        "slug": org["slug"],
    }


async def seed(store: Store, ids: dict[str, str], start: int, count: int) -> None:
    """`count` more records of each kind for the measured owner, all within the last hour."""
    now = utcnow()
    install, org = ids["install"], ids["org"]
    for first in range(start, start + count, BATCH):
        numbers = range(first, min(first + BATCH, start + count))

        def at(n: int) -> Any:
            return now - timedelta(seconds=3600 * ((n * 7919) % count) / count)

        await store["pipeline_events"].insert_many(
            [
                {
                    "_id": new_id(),
                    "installId": install,
                    "eventType": ("step_completed", "step_failed", "gate_triggered", "scheduler_run")[n % 4],
                    "stepKey": "lead",
                    "meta": {"runId": f"r{n}"},
                    "createdAt": at(n),
                }
                for n in numbers
            ]
        )
        await store["agent_runs"].insert_many(
            [
                {
                    "_id": new_id(),
                    "installId": install,
                    "agentKey": "lead",
                    "runId": f"r{n}",
                    "status": "completed",
                    "inputTokens": 10,
                    "outputTokens": 5,
                    "errorMessage": None,
                    "createdAt": at(n),
                }
                for n in numbers
            ]
        )
        await store["security_requests"].insert_many(
            [
                {
                    "_id": new_id(),
                    "installId": install,
                    "agentKey": "lead",
                    "agentName": "Lead",
                    "runId": f"r{n}",
                    "method": "GET",
                    "url": "https://example.com/x",
                    "hostname": "example.com",
                    "path": "/x",
                    "decision": "ALLOW",
                    "decisionSource": "rule",
                    "reason": None,
                    "judgeReasoning": None,
                    "judgeConfidence": None,
                    "statusCode": 200,
                    "latencyMs": 5,
                    "reportOnly": False,
                    "createdAt": at(n),
                }
                for n in numbers
            ]
        )
        await store["org_audit"].insert_many(
            [
                {
                    "_id": new_id(),
                    "orgId": org,
                    "actorId": None,
                    "actorEmail": None,
                    "action": "org.settings_changed",
                    "meta": {"n": n},
                    "createdAt": at(n),
                }
                for n in numbers
            ]
        )
        await store["runs"].insert_many(
            [
                {
                    "_id": new_id(),
                    "runId": f"seed-{n}",
                    "installId": install if n % 2 else "org-install",
                    "templateId": ids["template"],
                    "templateVersion": 1,
                    "platform": "svc",
                    "owner": {"kind": "user", "id": "u"} if n % 2 else {"kind": "org", "id": org},
                    "agentKey": "lead",
                    "status": "completed" if n % 5 else "failed",
                    "inputTokens": 10,
                    "outputTokens": 5,
                    "errorMessage": None,
                    "source": "self_report",
                    "createdAt": at(n),
                }
                for n in numbers
            ]
        )
        await store.installs.insert_many(
            [
                {
                    "_id": new_id(),
                    "templateId": "other",
                    "templateName": "Other",
                    "platform": "svc",
                    "status": "completed",
                    "owner": {"kind": "user", "id": f"other-{n % 500}"},
                    "definition": {"agents": AGENTS},
                    "createdAt": at(n),
                }
                for n in numbers
            ]
        )
    await rebuild_run_stats(store, {"templateId": ids["template"]})


def routes(ids: dict[str, str]) -> list[tuple[str, str, str]]:
    """(label, path, credential) of each measured route."""
    install, slug = ids["install"], ids["slug"]
    return [
        ("events", f"/api/installs/{install}/events", "key"),
        ("agent-runs limit 50", f"/api/installs/{install}/agent-runs?limit=50", "key"),
        ("security log (200)", f"/api/installs/{install}/security/requests", "key"),
        ("run-log 30 days", f"/api/installs/{install}/run-log?days=30", "key"),
        ("org audit log page 1", f"/api/orgs/{slug}/audit-log?limit=50", "cookie"),
        ("org audit log page 5", f"/api/orgs/{slug}/audit-log?limit=50&page=5", "cookie"),
        ("org analytics 30 days", f"/api/orgs/{slug}/analytics", "cookie"),
        ("billing 30 days", f"/api/billing?templateId={ids['template']}", "key"),
        ("installs/mine", "/api/installs/mine", "cookie"),
        ("runs limit 100", f"/api/runs?templateId={ids['template']}&limit=100", "key"),
    ]


async def measure(
    session: aiohttp.ClientSession, base: str, ids: dict[str, str], requests: int
) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for label, path, credential in routes(ids):
        headers = (
            {"Cookie": ids["cookie"]} if credential == "cookie" else {"Authorization": f"Bearer {ids['key']}"}
        )
        times = []
        for i in range(requests + 2):
            started = time.perf_counter()
            async with session.get(base + path, headers=headers) as reply:
                if reply.status != 200:
                    raise RuntimeError(f"{path}: {reply.status} {await reply.text()}")
                await reply.read()
            if i >= 2:  # warm-up
                times.append((time.perf_counter() - started) * 1000)
        out[label] = times
    return out


async def main(args: argparse.Namespace) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[int, dict[str, list[float]]] = {}
    async with running_service(SVC_RATE_LIMITS="off", SVC_SCHEDULER="off") as service:
        port = json.loads((service.data_dir / STATE_FILE).read_text())["port"]
        store = Store.connect(uri_for(port))
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
                ids = await setup(session, service.base, store)
                seeded = 0
                for size in sizes:
                    started = time.perf_counter()
                    await seed(store, ids, seeded, size - seeded)
                    seeded = size
                    print(f"seeded {size:,} of each in {time.perf_counter() - started:.1f} s", flush=True)
                    results[size] = await measure(session, service.base, ids, args.requests)
        finally:
            await store.close()
    header = f"{'route (one client)':<26}" + "".join(f"{f'p50 @{s:,}':>12}{f'p99 @{s:,}':>12}" for s in sizes)
    print("\n" + header)
    for label, _, _ in routes({"install": "", "slug": "", "template": ""}):
        cells = "".join(
            f"{percentile(results[s][label], 0.5):>12.1f}{percentile(results[s][label], 0.99):>12.1f}"
            for s in sizes
        )
        print(f"{label:<26}{cells}")
    print("(milliseconds)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="2000,20000")
    parser.add_argument("--requests", type=int, default=20)
    asyncio.run(main(parser.parse_args()))
