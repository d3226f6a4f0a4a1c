"""Load bench: many clients at once against `svc serve` with the embedded database.

    .venv/bin/python bench/load.py [--seconds 60] [--clients 64] [--seed 2000] [--big]

Starts a fake providerA whose every answer takes 2 s and `svc serve` (embedded
database, local Ray) as a user would, seeds 2,000 runs of one template within the
last hour (through the run self-report route, on orchC installs against a fake Bedrock Agents
server: a managed install's runs are recorded by the runtime alone and its reports are refused),
then measures:

1. `GET /api/runs` alone, one client (and, with --big, again at 20,000 runs);
2. 64 clients for 60 s over a mix: the public template list, `GET /api/runs`,
   run self-reports, key identity (`GET /api/installs/whoami`) and, on one client
   in eight, a synchronous run with the slow model: per route requests, non-2xx,
   p50 and p99; reports accepted against reports counted; the CPU the service and
   the database process spent (where the time goes);
3. run self-reports alone at 64 clients, per second;
4. 100 synchronous runs at once on 10 warm installs, against the model's own 2 s;
and the service's memory (RSS, API process and database process) before and after.
Targets (issue 22): runs p99 < 30 ms at 2,000 and within 1.5x of that at 20,000; the
mix with 0 non-2xx, 0 lost reports and p99 < 500 ms on every route; self-reports
>= 300/s; 100 runs within 1.5x of 2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).parent.parent))
sys.path.insert(0, str(Path(__file__).parent))
import dbprofile  # bench/dbprofile.py
from harness import children, percentile, rss_mb, running_service, start_fake  # bench/harness.py

from plugins.builtin.orch_c_bedrock import ENDPOINT_ENV
from svc.core import Store
from svc.subprocesses.embedded_db import STATE_FILE, free_port, uri_for
from tests.fakes import orch_c
from tests.fakes.llm import DEFAULT_KEY

MODEL_S = 2.0
AGENTS = [
    {"key": "lead", "name": "Lead", "model": "providerA:small", "prompt": "Lead."},
    {"key": "writer", "name": "Writer", "model": "providerA:small", "prompt": "Write.", "reportsTo": "lead"},
]


def cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / 100
    except (OSError, IndexError, ValueError):
        return 0.0


def database_pid(pid: int) -> int | None:
    """The embedded database server started by the API process."""
    for child in children(pid):
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes()
            if b"secantus" in command or b"embedded_db_child" in command:
                return child
        except OSError:
            continue
    return None


class Client:
    """One HTTP session and the timings of what it sent, by route."""

    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base
        self.times: dict[str, list[float]] = defaultdict(list)
        self.failures: dict[str, int] = defaultdict(int)
        self.statuses: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))

    async def call(
        self, route: str, method: str, path: str, key: str | None = None, body: Any = None
    ) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        started = time.perf_counter()
        try:
            async with self.session.request(method, self.base + path, json=body, headers=headers) as reply:
                payload = await reply.json(content_type=None) if reply.status != 204 else None
                status = reply.status
        except (TimeoutError, aiohttp.ClientError):
            status, payload = 599, None
        self.times[route].append(time.perf_counter() - started)
        self.statuses[route][status] += 1
        if not 200 <= status < 300:
            self.failures[route] += 1
        return status, payload


async def must(client: Client, method: str, path: str, key: str | None = None, body: Any = None) -> Any:
    status, payload = await client.call("setup", method, path, key, body)
    if status >= 300:
        raise RuntimeError(f"{method} {path}: {status} {payload}")
    return payload


async def new_key(client: Client, cookie: str) -> str:
    async with client.session.post(
        f"{client.base}/api/auth/keys", json={}, headers={"Cookie": cookie}
    ) as reply:
        return str((await reply.json())["key"])


async def template(client: Client, key: str, slug: str) -> str:
    body = {"slug": slug, "name": slug, "visibility": "public", "definition": {"agents": AGENTS[:1]}}
    created = await must(client, "POST", "/api/templates", key, body)
    await must(client, "POST", f"/api/templates/{created['id']}/publish", key, {"changeLog": "first"})
    return str(created["id"])


async def install(
    client: Client, cookie: str, template_id: str, credentials: dict[str, str] | None = None
) -> tuple[str, str]:
    """An install with its own key (the install links the creating key: whoami resolves): on svc,
    or on orchC with the fake account's `credentials` (the installs whose runs are reported)."""
    key = await new_key(client, cookie)
    body: dict[str, Any] = {"templateId": template_id, "platform": "svc"}
    if credentials is not None:
        body = {"templateId": template_id, "platform": "orchC", "credentials": credentials}
    made = await must(client, "POST", "/api/installs", key, body)
    return str(made["installId"]), key


async def start_orch_c() -> tuple[orch_c.FakeBedrockAgents, web.AppRunner, str]:
    """A fake Bedrock Agents API (the orchC upstream) for the reported installs."""
    fake = orch_c.FakeBedrockAgents()
    runner = web.AppRunner(orch_c.create_app(fake))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return fake, runner, f"http://127.0.0.1:{port}"


def report(n: int) -> dict[str, Any]:
    return {
        "agentKey": "lead",
        "status": "failed" if n % 10 == 0 else "completed",
        "inputTokens": 100 + n % 7,
        "outputTokens": 50 + n % 5,
        "runId": f"r-{n}",
        "errorMessage": "boom" if n % 10 == 0 else None,
    }


async def seed(client: Client, targets: list[tuple[str, str]], start: int, count: int) -> None:
    """`count` self-reports spread over the installs, 16 at a time."""
    numbers = iter(range(start, start + count))

    async def worker() -> None:
        for n in numbers:
            install_id, key = targets[n % len(targets)]
            await must(client, "POST", f"/api/installs/{install_id}/runs", key, report(n))

    await asyncio.gather(*(worker() for _ in range(16)))


def row(name: str, times: list[float], failures: int, seconds: float | None = None) -> str:
    rate = f"{len(times) / seconds:8.1f}" if seconds else f"{'':>8}"
    return (
        f"{name:<28}{len(times):>8}{failures:>9}{rate}"
        f"{percentile(times, 0.5) * 1000:>10.1f}{percentile(times, 0.99) * 1000:>10.1f}"
    )


HEADER = f"{'route':<28}{'requests':>8}{'non-2xx':>9}{'per s':>8}{'p50 ms':>10}{'p99 ms':>10}"


async def runs_alone(client: Client, template_id: str, key: str, n: int, label: str) -> str:
    client.times.pop("runs", None)
    client.failures.pop("runs", None)
    for _ in range(n):
        await client.call("runs", "GET", f"/api/runs?templateId={template_id}&limit=100", key)
    return row(label, client.times["runs"], client.failures["runs"])


async def main(args: argparse.Namespace) -> None:
    _fake, fake_runner, fake_url = await start_fake("providerA", MODEL_S)
    bedrock, bedrock_runner, bedrock_url = await start_orch_c()
    lines: list[str] = []
    try:
        async with running_service(
            **{ENDPOINT_ENV: bedrock_url},
            SVC_RATE_LIMITS="off",
            SVC_SCHEDULER="off",
            SVC_PROVIDERA_API_KEY=DEFAULT_KEY,
            SVC_PROVIDERA_BASE_URL=fake_url,
            SVC_ACTOR_IDLE_SECONDS="600",
            # The fake Bedrock listens on 127.0.0.1: orchC's endpoint override is vetted by the
            # egress guard like any outbound URL, which refuses loopback unless told.
            SVC_EGRESS_ALLOW_PRIVATE="true",
        ) as service:
            pid = service.pid
            db_pid = database_pid(pid)
            memory_before = (rss_mb(pid), rss_mb(db_pid) if db_pid else 0.0)
            connector = aiohttp.TCPConnector(limit=0)
            timeout = aiohttp.ClientTimeout(total=120)
            async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
                setup = Client(session, service.base)
                body = {"email": "load@example.com", "password": "load-password", "name": "Load"}
                async with session.post(f"{service.base}/api/auth/signup", json=body) as reply:
                    cookie = f"svc_session={reply.cookies['svc_session'].value}"
                owner_key = await new_key(setup, cookie)
                reported = await template(setup, owner_key, "load-reported")
                ran = await template(setup, owner_key, "load-ran")
                report_targets = [
                    await install(setup, cookie, reported, bedrock.credentials()) for _ in range(10)
                ]
                run_targets = [await install(setup, cookie, ran) for _ in range(10)]
                for n in range(15):  # other published templates in the public list
                    await template(setup, owner_key, f"load-other-{n}")
                started = time.perf_counter()
                await seed(setup, report_targets, 0, args.seed)
                seeded_s = time.perf_counter() - started
                print(f"seeded {args.seed} runs in {seeded_s:.1f} s", flush=True)
                for install_id, key in run_targets:  # warm every actor
                    await must(setup, "POST", f"/api/installs/{install_id}/run", key, {"task": "warm"})

                lines.append(HEADER)
                lines.append(await runs_alone(setup, reported, owner_key, 200, f"runs alone @{args.seed}"))
                print(lines[-1], flush=True)

                # 2. the mix
                counter = itertools.count(10_000_000)
                accepted: set[str] = set()
                clients = [Client(session, service.base) for _ in range(args.clients)]
                deadline = time.monotonic() + args.seconds

                async def mixed(index: int, client: Client) -> None:
                    if index % 8 == 7:
                        while time.monotonic() < deadline:
                            install_id, key = run_targets[index % len(run_targets)]
                            await client.call(
                                "sync run (2 s model)",
                                "POST",
                                f"/api/installs/{install_id}/run",
                                key,
                                {"task": "go"},
                            )
                        return
                    for step in itertools.cycle(range(4)):
                        if time.monotonic() >= deadline:
                            return
                        install_id, key = report_targets[index % len(report_targets)]
                        if step == 0:
                            await client.call("public template list", "GET", "/api/templates")
                        elif step == 1:
                            await client.call(
                                "runs (limit 100)",
                                "GET",
                                f"/api/runs?templateId={reported}&limit=100",
                                owner_key,
                            )
                        elif step == 2:
                            body = report(next(counter))
                            status, _ = await client.call(
                                "run self-report", "POST", f"/api/installs/{install_id}/runs", key, body
                            )
                            if status == 200:
                                accepted.add(body["runId"])
                        else:  # an svc install's key: only those are linked to their install (spec)
                            _, linked = run_targets[index % len(run_targets)]
                            await client.call("key identity (whoami)", "GET", "/api/installs/whoami", linked)

                profiled = None
                if args.db_profile:
                    port = json.loads((service.data_dir / STATE_FILE).read_text())["port"]
                    profiled = Store.connect(uri_for(port))
                    await dbprofile.start(profiled)
                cpu_before = (cpu_s(pid), cpu_s(db_pid) if db_pid else 0.0)
                started = time.perf_counter()
                await asyncio.gather(*(mixed(i, c) for i, c in enumerate(clients)))
                mix_s = time.perf_counter() - started
                cpu_after = (cpu_s(pid), cpu_s(db_pid) if db_pid else 0.0)
                if profiled is not None:
                    lines.append("")
                    lines.append("database time during the mix, by command shape (profiler on):")
                    lines += await dbprofile.report(profiled)
                    await profiled.close()
                lines.append("")
                lines.append(f"mix: {args.clients} clients for {mix_s:.0f} s")
                lines.append(HEADER)
                routes = sorted({r for c in clients for r in c.times})
                total = 0
                for route in routes:
                    times = [t for c in clients for t in c.times[route]]
                    fails = sum(c.failures[route] for c in clients)
                    total += len(times)
                    lines.append(row(route, times, fails, mix_s))
                    codes: dict[int, int] = defaultdict(int)
                    for c in clients:
                        for code, seen in c.statuses[route].items():
                            codes[code] += seen
                    if fails:
                        lines.append(f"    statuses: {dict(sorted(codes.items()))}")
                lines.append(f"all routes: {total / mix_s:.0f} requests/s")
                lines.append(
                    f"CPU during the mix: service {cpu_after[0] - cpu_before[0]:.1f} s, "
                    f"database {cpu_after[1] - cpu_before[1]:.1f} s of {mix_s:.0f} s wall on 2 cores"
                )
                summary = await must(setup, "GET", f"/api/runs?templateId={reported}&limit=1", owner_key)
                counted = summary["summary"]["totalRuns"] - args.seed
                lines.append(
                    f"reports accepted {len(accepted)}, counted {counted}, lost {len(accepted) - counted}"
                )
                print("\n".join(lines[-len(routes) - 6 :]), flush=True)

                # 3. self-reports alone
                reporters = [Client(session, service.base) for _ in range(args.clients)]
                deadline = time.monotonic() + 15

                async def reporting(index: int, client: Client) -> None:
                    install_id, key = report_targets[index % len(report_targets)]
                    while time.monotonic() < deadline:
                        await client.call(
                            "reports", "POST", f"/api/installs/{install_id}/runs", key, report(next(counter))
                        )

                started = time.perf_counter()
                await asyncio.gather(*(reporting(i, c) for i, c in enumerate(reporters)))
                alone_s = time.perf_counter() - started
                times = [t for c in reporters for t in c.times["reports"]]
                lines.append("")
                lines.append(HEADER)
                lines.append(
                    row(
                        f"self-reports alone x{args.clients}",
                        times,
                        sum(c.failures["reports"] for c in reporters),
                        alone_s,
                    )
                )
                print(lines[-1], flush=True)

                # 4. 100 runs at once on 10 warm installs
                runner = Client(session, service.base)
                cpu_before = (cpu_s(pid), cpu_s(db_pid) if db_pid else 0.0)
                started = time.perf_counter()
                await asyncio.gather(
                    *(
                        runner.call("100 runs", "POST", f"/api/installs/{i}/run", k, {"task": "go"})
                        for i, k in run_targets * 10
                    )
                )
                wall = time.perf_counter() - started
                cpu_after = (cpu_s(pid), cpu_s(db_pid) if db_pid else 0.0)
                lines.append("")
                lines.append(
                    f"100 sync runs at once on 10 warm installs: {wall:.2f} s = "
                    f"{wall / MODEL_S:.2f}x the model's {MODEL_S:.0f} s ({runner.failures['100 runs']} bad)"
                )
                lines.append(
                    f"  CPU meanwhile: service {cpu_after[0] - cpu_before[0]:.1f} s, "
                    f"database {cpu_after[1] - cpu_before[1]:.1f} s (the actors run in Ray workers)"
                )
                print(lines[-2], lines[-1], sep="\n", flush=True)

                if args.big:
                    total_runs = summary["summary"]["totalRuns"] + len(times)
                    extra = 20_000 - total_runs
                    if extra > 0:
                        await seed(setup, report_targets, 20_000_000, extra)
                    lines.append("")
                    lines.append(HEADER)
                    lines.append(await runs_alone(setup, reported, owner_key, 200, "runs alone @20000"))
                    print(lines[-1], flush=True)
            memory_after = (rss_mb(pid), rss_mb(db_pid) if db_pid else 0.0)
            lines.append("")
            lines.append(
                f"memory (RSS): service {memory_before[0]:.0f} -> {memory_after[0]:.0f} MB, "
                f"database {memory_before[1]:.0f} -> {memory_after[1]:.0f} MB"
            )
    finally:
        await fake_runner.cleanup()
        await bedrock_runner.cleanup()
    print("\n" + "\n".join(lines))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seed", type=int, default=2000)
    parser.add_argument("--big", action="store_true", help="also measure GET /api/runs at 20,000 runs")
    parser.add_argument(
        "--db-profile",
        action="store_true",
        help="record the database's commands during the mix and show where its time went "
        "(bench/dbprofile.py; the profiler slows the database, so the figures are not the bench's)",
    )
    asyncio.run(main(parser.parse_args()))
