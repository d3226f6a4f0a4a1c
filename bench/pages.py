"""Dashboard benchmark: an install page with 1,000 runs (target p99 under 50 ms), and the first
load of each page with everything it fetches (target under 300 KB).

    .venv/bin/python bench/pages.py [--runs 1000] [--requests 200]

Starts `svc serve` (embedded database, local Ray), signs a user up, publishes a
template and installs it over HTTP, then seeds the runs, their agent steps and
pipeline events straight into MongoDB (the write path is measured elsewhere).
Each page is requested with the session cookie; the time is the whole request on
127.0.0.1 (so an upper bound of the server-side render). The transfer column is
the page's HTML plus every stylesheet and script it links, uncompressed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
import uuid
from datetime import timedelta
from typing import Any

import aiohttp
from harness import percentile, running_service  # bench/harness.py

from svc.core import utcnow
from svc.core.store import Store
from svc.subprocesses.embedded_db import STATE_FILE, uri_for

WARM_UP = 5
ASSET = re.compile(r'(?:href|src)="(/static/[^"]+)"')


async def create_install(session: aiohttp.ClientSession, base: str) -> tuple[str, str]:
    """A user (session cookie) with a published template installed on svc."""
    email = f"bench-{uuid.uuid4().hex[:8]}@example.com"
    async with session.post(
        f"{base}/api/auth/signup", json={"email": email, "password": "correct horse battery"}
    ) as response:
        assert response.status == 201, await response.text()
        cookie = response.cookies["svc_session"].value
    headers = {"Cookie": f"svc_session={cookie}"}
    async with session.post(f"{base}/api/auth/keys", json={}, headers=headers) as response:
        key = (await response.json())["key"]
    auth = {"Authorization": f"Bearer {key}"}
    agents = [
        {"key": k, "name": k.title(), "model": "providerA:small", "prompt": "p"} for k in ("lead", "helper")
    ]
    body = {
        "slug": f"bench-{uuid.uuid4().hex[:8]}",
        "name": "Bench team",
        "visibility": "public",
        "definition": {"version": "v1", "agents": agents},
    }
    async with session.post(f"{base}/api/templates", json=body, headers=auth) as response:
        template_id = (await response.json())["id"]
    async with session.post(f"{base}/api/templates/{template_id}/publish", json={}, headers=auth) as response:
        assert response.status == 200, await response.text()
    async with session.post(
        f"{base}/api/installs", json={"templateId": template_id, "platform": "svc"}, headers=auth
    ) as response:
        install_id = (await response.json())["installId"]
    return cookie, install_id


async def seed(store: Store, install_id: str, runs: int) -> str:
    """`runs` finished runs over the last 30 days, two agent steps and two events each."""
    now = utcnow()
    run_docs: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    for n in range(runs):
        at = now - timedelta(minutes=43 * n)
        run_id = f"run-{n:06d}"
        status = "failed" if n % 17 == 0 else "completed"
        run_docs.append(
            {
                "_id": run_id,
                "installId": install_id,
                "status": status,
                "source": "run",
                "agentKey": "lead",
                "inputTokens": 120 + n % 50,
                "outputTokens": 40 + n % 20,
                "errorMessage": "upstream timeout" if status == "failed" else None,
                "createdAt": at,
                "startedAt": at,
                "endedAt": at + timedelta(seconds=4),
            }
        )
        for agent in ("lead", "helper"):
            steps.append(
                {
                    "_id": f"{run_id}-{agent}",
                    "installId": install_id,
                    "runId": run_id,
                    "agentKey": agent,
                    "status": status,
                    "inputTokens": 60,
                    "outputTokens": 20,
                    "errorMessage": None,
                    "durationMs": 1500,
                    "startedAt": at,
                    "createdAt": at + timedelta(seconds=2),
                }
            )
            events.append(
                {
                    "_id": uuid.uuid4().hex,
                    "installId": install_id,
                    "eventType": "step_completed" if status == "completed" else "step_failed",
                    "stepKey": agent,
                    "meta": {"runId": run_id},
                    "createdAt": at + timedelta(seconds=2),
                }
            )
    await store["pipeline_runs"].insert_many(run_docs)
    await store["agent_runs"].insert_many(steps)
    await store["pipeline_events"].insert_many(events)
    return run_docs[0]["_id"]


async def time_page(
    session: aiohttp.ClientSession, url: str, cookie: str, requests: int
) -> tuple[list[float], list[float]]:
    """Milliseconds per request after a warm-up: server-side (its Server-Timing) and end to end."""
    server, total = [], []
    for i in range(WARM_UP + requests):
        started = time.perf_counter()
        async with session.get(url, headers={"Cookie": f"svc_session={cookie}"}) as response:
            assert response.status == 200, (url, response.status)
            await response.read()
            timing = response.headers["Server-Timing"]
        if i >= WARM_UP:
            total.append((time.perf_counter() - started) * 1000)
            server.append(float(timing.split("dur=", 1)[1]))
    return server, total


async def first_load(session: aiohttp.ClientSession, url: str, cookie: str) -> int:
    """Bytes of the page and of every asset it links, uncompressed."""
    async with session.get(
        url, headers={"Cookie": f"svc_session={cookie}", "Accept-Encoding": "identity"}
    ) as r:
        html = await r.read()
    total = len(html)
    for path in set(ASSET.findall(html.decode())):
        async with session.get(url.split("/", 3)[0] + "//" + url.split("/", 3)[2] + path) as asset:
            total += len(await asset.read())
    return total


async def bench(runs: int, requests: int) -> list[tuple[str, list[float], list[float], int]]:
    results: list[tuple[str, list[float], list[float], int]] = []
    async with running_service(SVC_RATE_LIMITS="off", SVC_SCHEDULER="off") as service:
        db_port = json.loads((service.data_dir / STATE_FILE).read_text())["port"]
        store = Store.connect(uri_for(db_port))
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
                cookie, install_id = await create_install(session, service.base)
                run_id = await seed(store, install_id, runs)
                pages = [
                    (f"install page ({runs:,} runs)", f"/installs/{install_id}"),
                    ("run detail", f"/installs/{install_id}/runs/{run_id}"),
                    ("usage and charts", f"/installs/{install_id}/usage"),
                    ("home", "/"),
                    ("keys", "/keys"),
                    ("my templates", "/templates"),
                ]
                for label, path in pages:
                    url = service.base + path
                    server, total = await time_page(session, url, cookie, requests)
                    results.append((label, server, total, await first_load(session, url, cookie)))
        finally:
            await store.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    results = asyncio.run(bench(args.runs, args.requests))
    header = (
        f"{'page':<28} {'n':>5} {'server p50':>11} {'server p99':>11} {'total p50':>10} {'total p99':>10}"
        f" {'first load KB':>14}"
    )
    print("\n" + header)
    print("-" * len(header))
    for label, server, total, size in results:
        print(
            f"{label:<28} {len(server):>5} {percentile(server, 0.5):>11.1f} {percentile(server, 0.99):>11.1f}"
            f" {percentile(total, 0.5):>10.1f} {percentile(total, 0.99):>10.1f} {size / 1024:>14.1f}"
        )
    print("(milliseconds; server = the app's own time from its Server-Timing header, total = on 127.0.0.1)")
    print("\ntargets: install page p99 < 50 ms; first load < 300 KB")


if __name__ == "__main__":
    main()
