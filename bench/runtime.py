"""Managed-runtime benchmark against a fake providerA with a fixed 50 ms latency.

    .venv/bin/python bench/runtime.py [--runs 30] [--installs 20]

Starts the fake provider in this process and `svc serve` (embedded database, local
Ray) in another, then measures:
(a) the overhead of one synchronous run of a 2-agent team (the supervisor delegates
    once: three model calls) beyond its provider time, p50/p99;
(b) 20 installs run at once with cold actors, then again warm: wall time against the
    ideal (one run's time), and the cold start of one actor;
(c) access-policy evaluation with 100 rules, in microseconds;
(d) memory (RSS) per active install actor.
Targets: (a) p50 under 30 ms; (b) warm within 1.5x the ideal; (c) under 20 µs.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).parent.parent))
sys.path.insert(0, str(Path(__file__).parent))
from harness import percentile, running_service  # bench/harness.py
from policy import mixed_rules, policy

from svc.core.embedded import free_port
from svc.runtime.policy import compile_policy, evaluate
from tests.fakes.llm import DEFAULT_KEY, FakeLLM

LATENCY_S = 0.05


async def start_fake() -> tuple[FakeLLM, web.AppRunner, str]:
    fake = FakeLLM("providerA", latency_s=LATENCY_S, default_text="done")
    runner = web.AppRunner(fake.app())
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return fake, runner, f"http://127.0.0.1:{port}"


async def install(
    session: aiohttp.ClientSession, base: str, cookie: str, team: list[dict[str, object]], slug: str
) -> tuple[str, str]:
    """Publish a team and install it on svc with a fresh key (an svc install scopes its key to it)."""
    async with session.post(f"{base}/api/auth/keys", json={}, headers={"Cookie": cookie}) as response:
        key = (await response.json())["key"]
    headers = {"Authorization": f"Bearer {key}"}
    body = {"slug": slug, "name": slug, "visibility": "public", "definition": {"agents": team}}
    async with session.post(f"{base}/api/templates", json=body, headers=headers) as response:
        template = await response.json()
    async with session.post(f"{base}/api/templates/{template['id']}/publish", headers=headers) as response:
        await response.read()
    body = {"templateId": template["id"], "platform": "svc"}
    async with session.post(f"{base}/api/installs", json=body, headers=headers) as response:
        return str((await response.json())["installId"]), key


async def timed_run(session: aiohttp.ClientSession, base: str, target: tuple[str, str]) -> float:
    install_id, key = target
    started = time.perf_counter()
    async with session.post(
        f"{base}/api/installs/{install_id}/run",
        json={"task": "go"},
        headers={"Authorization": f"Bearer {key}"},
    ) as response:
        result = await response.json()
        assert result.get("status") == "completed", result
    return time.perf_counter() - started


def actor_memory_mb() -> tuple[int, float]:
    """How many install actor processes run, and their mean resident memory (Linux /proc)."""
    sizes = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if "InstallActor" not in cmdline:
                continue
            status = (proc / "status").read_text()
        except (OSError, ValueError):
            continue
        rss_kb = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
        sizes.append(rss_kb / 1024)
    return len(sizes), statistics.mean(sizes) if sizes else 0.0


def policy_micros() -> float:
    compiled = compile_policy(policy(mixed_rules(100)))
    for _ in range(1000):
        evaluate(compiled, "GET", "https://nomatch.example.org/x")
    timings = []
    for _ in range(20):
        started = time.perf_counter()
        for _ in range(5000):
            evaluate(compiled, "GET", "https://nomatch.example.org/x")
        timings.append((time.perf_counter() - started) / 5000 * 1e6)
    return statistics.median(timings)


async def main(args: argparse.Namespace) -> None:
    fake, fake_runner, fake_url = await start_fake()
    rows: list[tuple[str, str, str]] = []
    try:
        async with running_service(
            SVC_RATE_LIMITS="off",
            SVC_SCHEDULER="off",
            SVC_PROVIDERA_API_KEY=DEFAULT_KEY,
            SVC_PROVIDERA_BASE_URL=fake_url,
            SVC_ACTOR_IDLE_SECONDS="600",
        ) as service:
            base = service.base
            timeout = aiohttp.ClientTimeout(total=600)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                body = {"email": "bench@example.com", "password": "bench-password"}
                async with session.post(f"{base}/api/auth/signup", json=body) as response:
                    cookie = f"svc_session={response.cookies['svc_session'].value}"
                team = [
                    {"key": "lead", "name": "Lead", "model": "providerA:small", "prompt": "Lead."},
                    {
                        "key": "helper",
                        "name": "Helper",
                        "model": "providerA:small",
                        "prompt": "Help.",
                        "reportsTo": "lead",
                    },
                ]
                duo = await install(session, base, cookie, team, "bench-duo")
                # (a) one sync run of a 2-agent team: three provider calls of 50 ms each.
                overheads = []
                for i in range(args.runs + 1):
                    fake.script(tool_calls=[{"name": "delegate_helper", "arguments": {"task": "help"}}])
                    fake.script(text="helped")
                    fake.script(text="final")
                    elapsed = await timed_run(session, base, duo)
                    if i:  # the first run starts the actor
                        overheads.append((elapsed - 3 * LATENCY_S) * 1000)
                rows.append(
                    (
                        "(a) run overhead beyond provider time",
                        f"p50 {percentile(overheads, 0.5):.1f} ms / p99 {percentile(overheads, 0.99):.1f} ms",
                        "p50 < 30 ms",
                    )
                )
                # (b) many installs at once, cold then warm.
                solo = [{"key": "lead", "name": "Lead", "model": "providerA:small", "prompt": "Lead."}]
                ids = [
                    await install(session, base, cookie, solo, f"bench-solo-{i}")
                    for i in range(args.installs)
                ]
                ideal = await timed_run(session, base, ids[0])  # cold start of one actor
                warm_one = await timed_run(session, base, ids[0])
                started = time.perf_counter()
                await asyncio.gather(*(timed_run(session, base, i) for i in ids[1:]))
                cold_wall = time.perf_counter() - started
                started = time.perf_counter()
                await asyncio.gather(*(timed_run(session, base, i) for i in ids))
                warm_wall = time.perf_counter() - started
                rows.append(("(b) cold start of one actor", f"{(ideal - warm_one) * 1000:.0f} ms", ""))
                rows.append(
                    (
                        f"(b) {args.installs - 1} installs at once, cold",
                        f"{cold_wall:.2f} s ({cold_wall / warm_one:.1f}x ideal {warm_one * 1000:.0f} ms)",
                        "",
                    )
                )
                rows.append(
                    (
                        f"(b) {args.installs} installs at once, warm",
                        f"{warm_wall:.2f} s ({warm_wall / warm_one:.1f}x ideal)",
                        "<= 1.5x",
                    )
                )
                count, mean_mb = actor_memory_mb()
                rows.append(("(d) memory per install actor", f"{mean_mb:.0f} MB RSS ({count} actors)", ""))
    finally:
        await fake_runner.cleanup()
    rows.insert(3, ("(c) policy evaluation, 100 rules", f"{policy_micros():.1f} µs", "< 20 µs"))
    width = max(len(r[0]) for r in rows) + 2
    print(f"\n{'measurement':<{width}}{'result':<48}target")
    print("-" * (width + 60))
    for name, result, target in rows:
        print(f"{name:<{width}}{result:<48}{target}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--installs", type=int, default=20)
    asyncio.run(main(parser.parse_args()))
