"""API overhead benchmark: what an authenticated call costs next to a bare aiohttp handler.

Starts `svc serve` (embedded database, local Ray, rate limits counting at 1000x so the
limiter runs without refusing) and a bare aiohttp server, each in its own process,
then drives each target with 2 concurrent clients x 2,000 requests over keep-alive
connections and prints requests/second and p50/p99 latency. The figure that matters
is the ratio to the bare handler measured in the same run (target: auth/me <= 3x).

    .venv/bin/python bench/api.py [--requests 2000] [--clients 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

import aiohttp
from harness import running_service, wait_ready  # bench/harness.py

from svc.subprocesses.embedded_db import free_port

BARE_SERVER = """
import sys
from aiohttp import web
async def handler(request):
    return web.json_response({"ok": True})
app = web.Application()
app.router.add_get("/bare", handler)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""


@dataclass
class Result:
    """Latencies of one target."""

    name: str
    latencies_ms: list[float]
    wall_s: float

    @property
    def rps(self) -> float:
        return len(self.latencies_ms) / self.wall_s

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def drive(name: str, url: str, headers: dict[str, str], clients: int, requests: int) -> Result:
    """`clients` concurrent keep-alive clients, each sending `requests` GETs one after another."""
    latencies: list[float] = []

    async def one_client() -> None:
        async with aiohttp.ClientSession(headers=headers) as session:
            for _ in range(50):  # warm-up, not measured
                async with session.get(url) as response:
                    await response.read()
            for _ in range(requests):
                started = time.perf_counter()
                async with session.get(url) as response:
                    await response.read()
                latencies.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(one_client() for _ in range(clients)))
    return Result(name, latencies, time.perf_counter() - started)


async def main(args: argparse.Namespace) -> None:
    bare_port = free_port()
    bare = subprocess.Popen([sys.executable, "-c", BARE_SERVER, str(bare_port)])
    try:
        rate_limits = os.environ.get("BENCH_RATE_LIMITS", "1000")
        async with running_service(SVC_RATE_LIMITS=rate_limits, SVC_SCHEDULER="off") as service:
            base = service.base
            await wait_ready(f"http://127.0.0.1:{bare_port}/bare")
            async with aiohttp.ClientSession() as session:
                body = {"email": "bench@example.com", "password": "bench-password", "name": "Bench"}
                async with session.post(f"{base}/api/auth/signup", json=body) as response:
                    assert response.status == 201, await response.text()
                    cookie = response.cookies["svc_session"].value
            targets = [
                ("bare aiohttp handler", f"http://127.0.0.1:{bare_port}/bare", {}),
                ("GET /api/auth/me (session)", f"{base}/api/auth/me", {"Cookie": f"svc_session={cookie}"}),
                ("GET unknown path (404)", f"{base}/api/nowhere", {}),
            ]
            results = [await drive(name, url, h, args.clients, args.requests) for name, url, h in targets]
    finally:
        bare.terminate()
        bare.wait(timeout=30)
    print_table(results, args)


def print_table(results: list[Result], args: argparse.Namespace) -> None:
    bare = results[0]
    print(f"\n{args.clients} clients x {args.requests} requests each, keep-alive, same machine\n")
    header = f"{'target':<30} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'x bare (p50)':>13}"
    print(header)
    print("-" * len(header))
    for result in results:
        ratio = result.percentile(0.5) / bare.percentile(0.5)
        print(
            f"{result.name:<30} {result.rps:>8.0f} {result.percentile(0.5):>8.2f} "
            f"{result.percentile(0.99):>8.2f} {statistics.mean(result.latencies_ms):>8.2f} {ratio:>13.2f}"
        )
    print("\ntarget: GET /api/auth/me costs no more than 3x the bare handler")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=2)
    asyncio.run(main(parser.parse_args()))
