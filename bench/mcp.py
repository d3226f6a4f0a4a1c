"""MCP tool calls through the service's toolbox against a local server (docs/mcp.md).

    .venv/bin/python bench/mcp.py [--calls 300]

Starts the embedded database and our SDK-built MCP server (tests/fakes/mcp_exact.py) over
streamable HTTP on this machine, then measures:
(a) the added latency of one tool call through the toolbox (the MCP rules, the security-log entry
    written to the database, the metrics counter) over the same call made directly on an open SDK
    session, p50 and p99: target p50 under 5 ms for a local server;
(b) a team with 3 MCP servers: the time from a run's start to the moment its first model call can
    be made (every server listed, in parallel; consent read), cold (connections opened) and warm
    (the actor's pool has them): target within 300 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Run as a script, this file's folder comes first on the path, and this file is called `mcp`:
# put the repository there instead, so `import mcp` finds the SDK.
sys.path[0] = str(Path(__file__).resolve().parent.parent)

from config.settings import Settings  # noqa: E402
from plugins.manager import PROVIDER_BUILTINS, Plugins  # noqa: E402
from scripts.mcp_servers import free_port, wait_for_port  # noqa: E402
from svc.core import Store  # noqa: E402
from svc.runtime import LLM, McpService, SecurityLog  # noqa: E402
from svc.subprocesses import EmbeddedMongo  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def team(url: str, servers: int) -> dict[str, Any]:
    names = [f"exact{n}" for n in range(servers)]
    policy = {"accessPolicyVersion": "1", "mcp": {"rules": [{"match": {"tool": "echo"}, "action": "allow"}]}}
    agent = {
        "key": "lead",
        "name": "Lead",
        "model": "providerA:small",
        "mcpServers": names,
        "accessPolicy": policy,
    }
    return {"agents": [agent], "mcpServers": [{"name": n, "url": url} for n in names]}


async def measure(url: str, store: Store, calls: int) -> None:
    llm = LLM(Plugins(builtins=PROVIDER_BUILTINS), Settings.from_env({}), store)
    service = McpService(store, llm, "providerA:small", {}, allow_private=True)
    log = SecurityLog(store)
    install = {"_id": "bench", "templateId": "t", "templateSlug": "t", "owner": {"kind": "user", "id": "u"}}

    def run(definition: dict[str, Any], run_id: str) -> Any:
        mcp = service.for_install(install, run_id, {}, definition)
        mcp.consent_required = False  # the bench measures the path, not the deployer's consent
        return mcp

    # (a) the same call, alternately direct on the toolbox's own open session and through the
    # toolbox (so a busy machine slows both alike): with the log kept in memory, as the run's
    # journal keeps it until its next write, and with today's awaited security-log write.
    kept: list[Any] = []

    async def in_memory(record: Any) -> None:
        kept.append(record)

    definition = team(url, 1)
    results: dict[str, list[float]] = {"direct": [], "memory": [], "logged": []}
    boxes = {
        "memory": run(definition, "run-a").toolbox(definition["agents"][0], in_memory),
        "logged": run(definition, "run-b").toolbox(definition["agents"][0], log.record),
    }
    for box in boxes.values():
        await box.specs()
    connection = next(iter(service.pool._open.values()))
    for n in range(calls + 20):
        for name in ("direct", "memory", "logged"):
            started = time.perf_counter()
            if name == "direct":
                await connection.call("echo", {"text": f"call {n}"})
            else:
                await boxes[name].call("mcp__exact0__echo", {"text": f"call {n}"})
            if n >= 20:  # the first 20 warm up
                results[name].append((time.perf_counter() - started) * 1000)
    plain, through, logged = results["direct"], results["memory"], results["logged"]
    added50 = statistics.median(through) - statistics.median(plain)
    added99 = percentile(through, 0.99) - percentile(plain, 0.99)
    logged50 = statistics.median(logged) - statistics.median(plain)

    # (b) a run's first model call with 3 servers: cold, then warm.
    definition = team(url, 3)
    agent = definition["agents"][0]
    await service.pool.aclose()
    started = time.perf_counter()
    cold_specs = await run(definition, "run-cold").toolbox(agent, log.record).specs()
    cold = (time.perf_counter() - started) * 1000
    warm: list[float] = []
    for n in range(20):
        started = time.perf_counter()
        await run(definition, f"run-warm-{n}").toolbox(agent, log.record).specs()
        warm.append((time.perf_counter() - started) * 1000)
    await service.aclose()

    def row(label: str, value: str, target: str = "") -> None:
        print(f"{label:<62} {value:>16}  {target}")

    row("measure", "result", "target")
    row(
        "direct call on an open SDK session, p50 / p99 (ms)",
        f"{statistics.median(plain):.2f} / {percentile(plain, 0.99):.2f}",
    )
    row(
        "the same call through the toolbox, p50 / p99 (ms)",
        f"{statistics.median(through):.2f} / {percentile(through, 0.99):.2f}",
    )
    row("(a) added latency, p50 / p99 (ms)", f"{added50:.2f} / {added99:.2f}", "p50 < 5")
    row("    with today's awaited security-log write, added p50 (ms)", f"{logged50:.2f}", "")
    row(
        "(b) 3 servers: run start to first model call, cold (ms)",
        f"{cold:.0f}",
        f"< 300 ({len(cold_specs)} tools)",
    )
    row(
        "(b) 3 servers: run start to first model call, warm p50 (ms)",
        f"{statistics.median(warm):.1f}",
        "< 300",
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        database = EmbeddedMongo(Path(directory))
        await database.start()
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "tests.fakes.mcp_exact", "http", str(port)],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_port(port, server, timeout_s=120)
            store = Store.connect(database.uri)
            await store.ensure_indexes()
            await measure(f"http://127.0.0.1:{port}/mcp", store, options.calls)
            await store.close()
        finally:
            server.terminate()
            server.wait()
            await database.stop()


if __name__ == "__main__":
    asyncio.run(main())
