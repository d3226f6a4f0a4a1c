"""Template benchmarks: validating a large definition, and listing 1,000 published templates.

    .venv/bin/python bench/templates.py [--iterations 200] [--requests 500]

1. Validation, in process: a 50-agent definition with 20 access rules per agent,
   through the same models and cross-field checks the API uses.
2. GET /api/templates against `svc serve` (embedded database, local Ray) holding
   1,000 published public templates (seeded straight into its database), for the
   first page, a deep page reached by cursor, and the largest page (limit 100).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from datetime import UTC, datetime, timedelta

import aiohttp
from harness import percentile, running_service  # bench/harness.py

from svc.core.store import Store
from svc.subprocesses.embedded_db import STATE_FILE, uri_for
from svc.templates.definitions import TeamDefinition, check_definition


def big_definition(agents: int = 50, rules: int = 20) -> dict[str, object]:
    """A definition of `agents` agents with `rules` rules each."""
    return {
        "requiredVariables": ["company", "region"],
        "agents": [
            {
                "key": f"agent-{i}",
                "name": f"Agent {i}",
                "model": "providerA:small",
                "reportsTo": None if i == 0 else "agent-0",
                "prompt": "Work for {{company}} in {{region}}. " * 20,
                "accessPolicy": {
                    "accessPolicyVersion": "1",
                    "defaultAction": "deny",
                    "rules": [
                        {
                            "match": {
                                "host": f"*.svc{r}.example.com",
                                "methods": ["GET", "POST"],
                                "pathPrefix": f"/v{r}",
                            },
                            "action": "allow",
                            "reason": "vendor",
                        }
                        for r in range(rules)
                    ],
                },
            }
            for i in range(agents)
        ],
    }


def bench_validation(iterations: int) -> tuple[str, list[float]]:
    raw = json.loads(json.dumps(big_definition()))
    timings = []
    for _ in range(iterations):
        started = time.perf_counter()
        check_definition(TeamDefinition.model_validate(raw))
        timings.append((time.perf_counter() - started) * 1000)
    return "validate 50 agents x 20 rules", timings


async def seed(uri: str, count: int) -> None:
    store = Store.connect(uri)
    definition = TeamDefinition.model_validate(big_definition(3, 2)).model_dump(mode="json")
    now = datetime.now(UTC)
    docs = [
        {
            "_id": f"{i:024x}",
            "kind": "template",
            "slug": f"team-{i}",
            "name": f"Team {i}",
            "description": "A team",
            "ownerTeam": "bench",
            "visibility": "public",
            "status": "published",
            "version": 1,
            "semver": "1.0.0",
            "publishedAt": now - timedelta(seconds=i),
            "changeLog": None,
            "definition": definition,
            "pricingModel": "free",
            "priceUsdCents": None,
            "forkable": True,
            "owner": {"kind": "user", "id": "bench"},
            "createdAt": now,
            "updatedAt": now,
        }
        for i in range(count)
    ]
    for start in range(0, count, 200):
        await store["templates"].insert_many(docs[start : start + 200])
    await store.close()


async def drive(url: str, requests: int) -> list[float]:
    timings = []
    async with aiohttp.ClientSession() as session:
        for _ in range(20):
            async with session.get(url) as response:
                await response.read()
        for _ in range(requests):
            started = time.perf_counter()
            async with session.get(url) as response:
                assert response.status == 200, response.status
                await response.read()
            timings.append((time.perf_counter() - started) * 1000)
    return timings


async def bench_listing(requests: int) -> list[tuple[str, list[float]]]:
    async with running_service(SVC_RATE_LIMITS="off", SVC_SCHEDULER="off") as service:
        base = service.base
        db_port = json.loads((service.data_dir / STATE_FILE).read_text())["port"]
        await seed(uri_for(db_port), 1000)
        async with aiohttp.ClientSession() as session:
            cursor, url = None, f"{base}/api/templates?limit=100"
            for _ in range(9):  # walk to the last page
                async with session.get(url if cursor is None else f"{url}&cursor={cursor}") as response:
                    cursor = (await response.json())["nextCursor"]
        return [
            ("GET /api/templates (first 50)", await drive(f"{base}/api/templates", requests)),
            (
                "GET ... limit=100, page 10",
                await drive(f"{base}/api/templates?limit=100&cursor={cursor}", requests),
            ),
        ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--requests", type=int, default=500)
    args = parser.parse_args()
    results = [bench_validation(args.iterations), *asyncio.run(bench_listing(args.requests))]
    header = f"{'measurement':<34} {'n':>6} {'p50 ms':>9} {'p99 ms':>9}"
    print("\n" + header)
    print("-" * len(header))
    for name, timings in results:
        p50, p99 = percentile(timings, 0.5), percentile(timings, 0.99)
        print(f"{name:<34} {len(timings):>6} {p50:>9.2f} {p99:>9.2f}")


if __name__ == "__main__":
    main()
