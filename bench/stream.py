"""Run-stream latency across API processes: from a step recorded to its event at a client.

    .venv/bin/python bench/stream.py [--runs 40] [--parallel 4]

Starts a fake providerA (each model call takes 100 ms) in this process and two `svc serve`
processes sharing one data directory, so one embedded database (the second joins the
first's). Runs are started through API 1 (the webhook, which answers at once); a client
of API 2 follows each run's stream. For every event that happened after its client had
connected, the latency is the time the client read it minus the event's `at` (stamped in
the install's actor when the step happened, before the event is written), so it covers
the write, API 2's shared poller and the relay. Same machine, same clock.
Target: p99 under 250 ms (issue 18).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import aiohttp
from aiohttp import web
from cryptography.fernet import Fernet

sys.path.insert(0, str(Path(__file__).parent.parent))
sys.path.insert(0, str(Path(__file__).parent))
from harness import percentile, wait_ready  # bench/harness.py

from svc.subprocesses.embedded_db import free_port
from tests.fakes.llm import DEFAULT_KEY, FakeLLM

LATENCY_S = 0.1


def serve(data_dir: str, port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """`svc serve` on the shared data directory."""
    return subprocess.Popen(
        [str(Path(sys.executable).with_name("svc")), "--log-level", "WARNING", "serve", "--port", str(port)],
        env={**os.environ, "SVC_DATA_DIR": data_dir, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def setup(
    session: aiohttp.ClientSession, base: str, installs: int
) -> tuple[str, list[tuple[str, str]]]:
    """A user, a one-agent team, and `installs` installs of it: (key, [(installId, webhook token)])."""
    body = {"email": f"bench-{time.time_ns()}@example.com", "password": "correct horse battery", "name": "B"}
    async with session.post(f"{base}/api/auth/signup", json=body) as response:
        cookie = f"svc_session={response.cookies['svc_session'].value}"
    async with session.post(f"{base}/api/auth/keys", json={}, headers={"Cookie": cookie}) as response:
        key = (await response.json())["key"]
    headers = {"Authorization": f"Bearer {key}"}
    team = {"agents": [{"key": "lead", "name": "Lead", "model": "providerA:small", "prompt": "Work."}]}
    body = {"slug": f"stream-{time.time_ns()}", "name": "Stream", "visibility": "public", "definition": team}
    async with session.post(f"{base}/api/templates", json=body, headers=headers) as response:
        template = await response.json()
    async with session.post(f"{base}/api/templates/{template['id']}/publish", headers=headers) as response:
        await response.read()
    made = []
    for _ in range(installs):
        body = {"templateId": template["id"], "platform": "svc"}
        async with session.post(f"{base}/api/installs", json=body, headers=headers) as response:
            made.append((await response.json())["installId"])
    async with session.get(f"{base}/api/installs/mine", headers={"Cookie": cookie}) as response:
        tokens = {item["id"]: item["webhookToken"] for item in await response.json()}
    return key, [(install_id, tokens[install_id]) for install_id in made]


async def watch_one(
    session: aiohttp.ClientSession, api1: str, api2: str, key: str, install: tuple[str, str]
) -> list[float]:
    """Start one run through API 1 and follow it on API 2; latencies (ms) of the live events."""
    install_id, token = install
    async with session.post(f"{api1}/api/webhook/{token}", json={"inputText": "go"}) as response:
        run_id = (await response.json())["runId"]
    url = f"{api2}/api/installs/{install_id}/runs/{run_id}/stream"
    latencies: list[float] = []
    async with session.get(url, headers={"Authorization": f"Bearer {key}"}) as response:
        connected = time.time()
        async for line in response.content:
            if not line.startswith(b"data: "):
                continue
            received = time.time()
            event = json.loads(line[6:])
            at = datetime.fromisoformat(event["at"].replace("Z", "+00:00")).timestamp()
            if at >= connected:
                latencies.append((received - at) * 1000)
    return latencies


async def main(args: argparse.Namespace) -> None:
    fake = FakeLLM("providerA", latency_s=LATENCY_S, default_text="done")
    runner = web.AppRunner(fake.app())
    await runner.setup()
    llm_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", llm_port).start()
    env = {
        "SVC_SECRET_KEYS": Fernet.generate_key().decode(),
        "SVC_PROVIDERA_API_KEY": DEFAULT_KEY,
        "SVC_PROVIDERA_BASE_URL": f"http://127.0.0.1:{llm_port}",
        "SVC_RATE_LIMITS": "off",
    }
    with tempfile.TemporaryDirectory() as data_dir:
        ports = [free_port(), free_port()]
        first = serve(data_dir, ports[0], env)
        processes = [first]
        try:
            api1, api2 = (f"http://127.0.0.1:{port}" for port in ports)
            await wait_ready(f"{api1}/api/health")
            processes.append(serve(data_dir, ports[1], env))  # joins the first's database
            await wait_ready(f"{api2}/api/health")
            async with aiohttp.ClientSession() as session:
                key, installs = await setup(session, api1, args.parallel)
                await asyncio.gather(*(watch_one(session, api1, api2, key, i) for i in installs))  # warm
                latencies: list[float] = []
                rounds = max(1, args.runs // args.parallel)
                for _ in range(rounds):
                    results = await asyncio.gather(
                        *(watch_one(session, api1, api2, key, i) for i in installs)
                    )
                    latencies.extend(value for result in results for value in result)
        finally:
            for process in reversed(processes):
                process.terminate()
                process.wait(timeout=60)
            await runner.cleanup()
    print(f"{'measure':<44}{'events':>8}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}")
    print(
        f"{'step recorded -> client on API 2':<44}{len(latencies):>8}"
        f"{percentile(latencies, 0.5):>10.1f}{percentile(latencies, 0.99):>10.1f}{max(latencies):>10.1f}"
    )
    print(f"({rounds * args.parallel} runs, {args.parallel} watched at once; target p99 < 250 ms)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--parallel", type=int, default=4)
    asyncio.run(main(parser.parse_args()))
