"""Run analytics and billing benchmark: GET /api/runs and GET /api/billing over 100,000 runs of one
template, with and without indexes.

    .venv/bin/python bench/runs.py [--runs 100000] [--requests 10]

Starts `svc serve` (embedded database, local Ray), creates a user, a key and a
published template over HTTP, then seeds the runs straight into MongoDB (batched
insert_many, spread over 10 installs, 3 platforms and 4 agents, about 29 days) with
20,000 security-log entries for the tool-call counts, then builds the hourly run
counters as `svc runs rebuild-stats` does (seeding bypasses the write path that
keeps them). Each endpoint in `endpoints()` is timed with the service's indexes,
then again after dropping every index of `runs` and `run_stats` except `_id` and
the unique (installId, runId) one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
from harness import percentile, running_service  # bench/harness.py

from svc.core.store import Store
from svc.runs import rebuild_run_stats
from svc.subprocesses.embedded_db import STATE_FILE, uri_for

PLATFORMS = ("orchA", "orchB", "svc")
AGENTS = ("lead", "writer", "editor", "researcher")
INSTALLS = 10
BATCH = 5_000
TOOL_CALLS = 20_000
WARM_UP = 2


@dataclass(frozen=True)
class Seeded:
    """What the benchmark created: the caller's key and the template its runs belong to."""

    key: str
    template_id: str
    template_slug: str


def endpoints(seeded: Seeded) -> list[tuple[str, str]]:
    """(label, path) of every request timed."""
    template = seeded.template_id
    return [
        ("GET /api/runs (limit 100)", f"/api/runs?templateId={template}"),
        ("GET /api/runs (limit 500)", f"/api/runs?templateId={template}&limit=500"),
        ("GET /api/billing (30 days)", f"/api/billing?templateId={template}"),
        ("GET /api/billing (7 days)", f"/api/billing?templateId={template}&periodDays=7"),
        ("GET /api/billing (1 install)", f"/api/billing?templateId={template}&installId=bench-install-3"),
    ]


async def create_owner(session: aiohttp.ClientSession, base: str) -> Seeded:
    """A user, their key and a published template, all over HTTP as a client would."""
    email = f"bench-{uuid.uuid4().hex[:8]}@example.com"
    async with session.post(
        f"{base}/api/auth/signup", json={"email": email, "password": "bench password 1", "name": "Bench"}
    ) as response:
        assert response.status == 201, await response.text()
        cookie = response.cookies["svc_session"].value
    async with session.post(
        f"{base}/api/auth/keys", json={}, headers={"Cookie": f"svc_session={cookie}"}
    ) as response:
        assert response.status == 201, await response.text()
        key = (await response.json())["key"]
    headers = {"Authorization": f"Bearer {key}"}
    team = {
        "version": "v1",
        "agents": [
            {"key": agent, "name": agent.title(), "model": "providerA:small", "prompt": f"You are {agent}."}
            for agent in AGENTS
        ],
    }
    body = {
        "slug": f"bench-{uuid.uuid4().hex[:8]}",
        "name": "Bench team",
        "visibility": "public",
        "definition": team,
        "pricingModel": "per_run",
        "priceUsdCents": 5,
    }
    async with session.post(f"{base}/api/templates", json=body, headers=headers) as response:
        assert response.status == 201, await response.text()
        template = await response.json()
    async with session.post(f"{base}/api/templates/{template['id']}/publish", json={}, headers=headers) as r:
        assert r.status == 200, await r.text()
    return Seeded(key, template["id"], template["slug"])


async def seed(store: Store, seeded: Seeded, runs: int) -> None:
    """`runs` run records, 10 installs and 20,000 security-log entries, as the service writes them."""
    rng = random.Random(7)
    now = datetime.now(UTC)
    installs = [
        {
            "_id": f"bench-install-{i}",
            "templateId": seeded.template_id,
            "templateVersion": 1,
            "platform": PLATFORMS[i % len(PLATFORMS)],
            "status": "completed",
            "createdAt": now,
        }
        for i in range(INSTALLS)
    ]
    await store.installs.insert_many(installs)
    for start in range(0, runs, BATCH):
        docs: list[dict[str, Any]] = []
        for i in range(start, min(start + BATCH, runs)):
            install = installs[i % INSTALLS]
            failed = rng.random() < 0.1
            tokens = install["platform"] != "orchB"
            docs.append(
                {
                    "_id": uuid.uuid4().hex[:24],
                    "runId": f"run-{i}",
                    "installId": install["_id"],
                    "templateId": seeded.template_id,
                    "templateVersion": 1,
                    "platform": install["platform"],
                    "owner": {"kind": "user", "id": "bench"},
                    "agentKey": rng.choice(AGENTS),
                    "platformAgentId": None,
                    "status": "failed" if failed else "completed",
                    "inputTokens": rng.randint(100, 5_000) if tokens else None,
                    "outputTokens": rng.randint(10, 1_000) if tokens else None,
                    "errorMessage": "tool crashed" if failed else None,
                    "source": "ingest",
                    "createdAt": now - timedelta(seconds=i * 25),
                }
            )
        await store["runs"].insert_many(docs, ordered=False)
    for start in range(0, TOOL_CALLS, BATCH):
        await store["security_requests"].insert_many(
            [
                {
                    "_id": uuid.uuid4().hex[:24],
                    "installId": installs[i % INSTALLS]["_id"],
                    "decision": "ALLOW",
                    "statusCode": None if i % 9 == 0 else 200,
                    "createdAt": now,
                }
                for i in range(start, min(start + BATCH, TOOL_CALLS))
            ]
        )


async def drop_runs_indexes(store: Store) -> list[str]:
    """Drop the runs and run_stats indexes except `_id` and the unique (installId, runId)."""
    dropped = []
    for collection in ("runs", "run_stats"):
        for name, info in (await store[collection].index_information()).items():
            if name == "_id_" or info.get("unique"):
                continue
            await store[collection].drop_index(name)
            dropped.append(f"{collection}.{name}")
    return dropped


async def time_requests(session: aiohttp.ClientSession, url: str, key: str, requests: int) -> list[float]:
    """Milliseconds per request, after a short warm-up."""
    headers = {"Authorization": f"Bearer {key}"}
    timings = []
    for i in range(WARM_UP + requests):
        started = time.perf_counter()
        async with session.get(url, headers=headers) as response:
            assert response.status == 200, await response.text()
            await response.read()
        if i >= WARM_UP:
            timings.append((time.perf_counter() - started) * 1000)
    return timings


async def bench(runs: int, requests: int) -> list[tuple[str, str, list[float]]]:
    results: list[tuple[str, str, list[float]]] = []
    async with running_service(SVC_RATE_LIMITS="off", SVC_SCHEDULER="off") as service:
        db_port = json.loads((service.data_dir / STATE_FILE).read_text())["port"]
        store = Store.connect(uri_for(db_port))
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
                seeded = await create_owner(session, service.base)
                started = time.perf_counter()
                await seed(store, seeded, runs)
                print(f"seeded {runs:,} runs in {time.perf_counter() - started:.1f} s")
                started = time.perf_counter()
                buckets = await rebuild_run_stats(store, {"templateId": seeded.template_id})
                print(f"built {buckets:,} run counters in {time.perf_counter() - started:.1f} s")
                for label, path in endpoints(seeded):
                    timings = await time_requests(session, service.base + path, seeded.key, requests)
                    results.append((label, "all", timings))
                print("dropped:", ", ".join(await drop_runs_indexes(store)))
                for label, path in endpoints(seeded):
                    timings = await time_requests(session, service.base + path, seeded.key, requests)
                    results.append((label, "_id + unique", timings))
        finally:
            await store.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=10)
    args = parser.parse_args()
    results = asyncio.run(bench(args.runs, args.requests))
    header = f"{'request':<30} {'indexes':<14} {'n':>4} {'p50 ms':>10} {'p99 ms':>10}"
    print("\n" + header)
    print("-" * len(header))
    for label, indexes, timings in results:
        p50, p99 = percentile(timings, 0.5), percentile(timings, 0.99)
        print(f"{label:<30} {indexes:<14} {len(timings):>4} {p50:>10.1f} {p99:>10.1f}")


if __name__ == "__main__":
    main()
