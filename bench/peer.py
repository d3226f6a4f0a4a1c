"""Our runtime side by side with LangGraph's own API server (issue 38), on the same fake model.

    .venv/bin/python bench/peer.py [--runs 30] [--rounds 2] [--quick]

The peer is langgraph-api (pinned in scripts/langgraph_peer.py, installed once into the ignored
`.cache/peer/`) served by `langgraph dev` with its in-memory runtime, running a one-node graph
that makes one chat-completions call (scripts/langgraph_peer_graph.py). Ours is `svc serve`
(embedded database, local Ray) running a one-agent template on svc installs, synchronously
(`POST /api/installs/:id/run`). Both call one fake model (tests/fakes/llm.py, openai-chat: our
providerB), 50 ms a call unless said. Rounds alternate between the two sides, each round on a
fresh server, and measure on each side:
- the first run on the fresh server (ours: a new install's first run starts its actor);
- the overhead per run beyond the model's 50 ms, p50 and p99 over --runs sequential runs;
- 20 runs at once (ours: 20 warm installs; the peer: 20 threads, each run once before);
- the memory of the whole process tree after those 20 (RSS summed, and PSS: shared pages once);
- 100 runs at once with a 2 s model (ours: 10 warm installs, 10 runs each; the peer: 100 threads).
The peer's in-memory queue polls for new runs every 0.5 s (`Runs.next` in langgraph_runtime_inmem,
a fixed sleep with no setting), and only takes runs created before the poll began: a run waits
0.5-1 s before it starts. That wait is taken out: the peer logs, for every run it starts,
`run_queue_ms` (created to picked up); each peer run's end is moved earlier by its own wait.
The peer's "as served" column keeps it in. Targets (issue 38): ours within 1.5x of the peer on
overhead, 20 at once and 100 at once.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).parent.parent))
sys.path.insert(0, str(Path(__file__).parent))
from harness import (  # bench/harness.py
    percentile,
    running_service,
    signup,
    start_fake,
    tree_memory_mb,
    wait_ready,
)
from runtime import LATENCY_S, install, overheads, timed_run  # bench/runtime.py

from scripts.langgraph_peer import PINS, LangGraphPeer, Pickup
from scripts.langgraph_peer import install as install_peer
from tests.fakes.llm import DEFAULT_KEY, FakeLLM

SLOW_S = 2.0  # the model of the 100-at-once row
LEAD = {"key": "lead", "name": "Lead", "model": "providerB:code-small", "prompt": "Lead."}


@dataclass(frozen=True)
class Counts:
    runs: int  # sequential runs for the overhead
    batch: int  # runs at once, 50 ms model
    burst: int  # runs at once, slow model
    burst_targets: int  # our installs the burst spreads over


@dataclass
class Side:
    """What one side measured, pooled over the rounds (times in seconds, overheads in ms)."""

    first: list[float] = field(default_factory=list)
    overhead_ms: list[float] = field(default_factory=list)
    batch: list[float] = field(default_factory=list)
    burst: list[float] = field(default_factory=list)
    memory: list[tuple[int, float, float]] = field(default_factory=list)
    # The peer as served, its queue's polling left in.
    served: dict[str, list[float]] = field(default_factory=dict)
    load: list[float] = field(default_factory=list)

    def serve(self, row: str, value: float) -> None:
        self.served.setdefault(row, []).append(value)


def session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=600), connector=aiohttp.TCPConnector(limit=0)
    )


async def at_once(runs: list) -> float:
    """Wall time of coroutines started together, to the last end."""
    started = time.perf_counter()
    await asyncio.gather(*runs)
    return time.perf_counter() - started


async def ours(counts: Counts, fake: FakeLLM, fake_url: str, side: Side) -> None:
    async with (
        running_service(
            SVC_RATE_LIMITS="off",
            SVC_SCHEDULER="off",
            SVC_PROVIDERB_API_KEY=DEFAULT_KEY,
            SVC_PROVIDERB_BASE_URL=fake_url,
            SVC_ACTOR_IDLE_SECONDS="600",
            SVC_ACTOR_PLACEMENT_SECONDS="600",  # the cold warm-up burst waits rather than answering 503
        ) as service,
        session() as http,
    ):
        base = service.base
        cookie = await signup(http, base, "peer-bench@example.com")
        targets = [await install(http, base, cookie, [LEAD], f"peer-bench-{i}") for i in range(counts.batch)]
        side.first.append(await timed_run(http, base, targets[0]))
        side.overhead_ms += await overheads(http, base, fake, targets[0], counts.runs, False)
        await asyncio.gather(*(timed_run(http, base, t) for t in targets[1:]))  # every actor started
        side.batch.append(await at_once([timed_run(http, base, t) for t in targets]))
        side.memory.append(tree_memory_mb(service.pid))
        fake.latency_s = SLOW_S
        try:
            spread = targets[: counts.burst_targets] * (counts.burst // counts.burst_targets)
            side.burst.append(await at_once([timed_run(http, base, t) for t in spread]))
        finally:
            fake.latency_s = LATENCY_S
        side.load.append(os.getloadavg()[0])


@dataclass(frozen=True)
class PeerRun:
    run_id: str
    sent: float  # wall clock (time.time()): the peer logs its pickups in wall-clock time
    ended: float


async def thread(http: aiohttp.ClientSession, base: str) -> str:
    async with http.post(f"{base}/threads", json={}) as response:
        return str((await response.json())["thread_id"])


async def peer_run(http: aiohttp.ClientSession, base: str, thread_id: str) -> PeerRun:
    """One run of the graph on a thread, waited for (`POST /threads/{id}/runs/wait`)."""
    sent = time.time()
    body = {"assistant_id": "lead", "input": {"task": "go"}}
    async with http.post(f"{base}/threads/{thread_id}/runs/wait", json=body) as response:
        result = await response.json()
        assert response.status == 200 and result.get("answer") == "done", (response.status, result)
        location = response.headers["Content-Location"]  # /threads/{thread}/runs/{run}
    return PeerRun(location.rsplit("/", 1)[1], sent, time.time())


def without_polling(runs: list[PeerRun], pickups: dict[str, Pickup]) -> float:
    """From the first request to the last end, each run's end moved earlier by its queue wait."""
    return max(r.ended - pickups[r.run_id].queue_s for r in runs) - min(r.sent for r in runs)


def as_served(runs: list[PeerRun]) -> float:
    return max(r.ended for r in runs) - min(r.sent for r in runs)


async def peer(counts: Counts, fake: FakeLLM, fake_url: str, side: Side) -> None:
    server = LangGraphPeer(fake_url, DEFAULT_KEY, jobs=max(counts.burst, counts.batch) + 28)
    base = server.launch()
    try:
        await wait_ready(f"{base}/ok")
        async with session() as http:
            threads = [await thread(http, base) for _ in range(counts.batch)]
            first = await peer_run(http, base, threads[0])
            sequential = [await peer_run(http, base, threads[0]) for _ in range(counts.runs)]
            await asyncio.gather(*(peer_run(http, base, t) for t in threads[1:]))  # each thread run once
            batch = await asyncio.gather(*(peer_run(http, base, t) for t in threads))
            side.memory.append(tree_memory_mb(server.process.pid if server.process else 0))
            many = [await thread(http, base) for _ in range(counts.burst)]
            fake.latency_s = SLOW_S
            try:
                burst = await asyncio.gather(*(peer_run(http, base, t) for t in many))
            finally:
                fake.latency_s = LATENCY_S
        pickups = server.pickups()
        side.first.append(without_polling([first], pickups))
        side.serve("first", as_served([first]))
        for run in sequential:
            side.overhead_ms.append((without_polling([run], pickups) - LATENCY_S) * 1000)
            side.serve("overhead", (as_served([run]) - LATENCY_S) * 1000)
            side.serve("queue", pickups[run.run_id].queue_s * 1000)
        side.batch.append(without_polling(batch, pickups))
        side.serve("batch", as_served(batch))
        side.burst.append(without_polling(burst, pickups))
        side.serve("burst", as_served(burst))
        side.load.append(os.getloadavg()[0])
    finally:
        server.stop()


def ms(value: float) -> str:
    return f"{value:.0f} ms" if value >= 10 else f"{value:.1f} ms"


def table(counts: Counts, rounds: int, us: Side, them: Side) -> list[str]:
    median = statistics.median
    peer_over = them.served.get("overhead", [0.0])
    rows: list[tuple[str, float, float, str, str, str]] = [
        (
            f"overhead per run, p50 ({counts.runs * rounds} runs)",
            percentile(us.overhead_ms, 0.5),
            percentile(them.overhead_ms, 0.5),
            "ms",
            "<= 1.5x",
            ms(percentile(peer_over, 0.5)),
        ),
        (
            "overhead per run, p99",
            percentile(us.overhead_ms, 0.99),
            percentile(them.overhead_ms, 0.99),
            "ms",
            "",
            ms(percentile(peer_over, 0.99)),
        ),
        (
            f"{counts.batch} runs at once, 50 ms model",
            median(us.batch),
            median(them.batch),
            "s",
            "<= 1.5x",
            f"{median(them.served['batch']):.2f} s",
        ),
        (
            f"{counts.burst} runs at once, {SLOW_S:.0f} s model",
            median(us.burst),
            median(them.burst),
            "s",
            "<= 1.5x",
            f"{median(them.served['burst']):.2f} s",
        ),
        (
            "first run on a fresh server",
            median(us.first),
            median(them.first),
            "s",
            "",
            f"{median(them.served['first']):.2f} s",
        ),
        (
            f"process tree RSS after {counts.batch} ran",
            median(m[1] for m in us.memory),
            median(m[1] for m in them.memory),
            "MB",
            "",
            "",
        ),
        (
            f"process tree PSS after {counts.batch} ran",
            median(m[2] for m in us.memory),
            median(m[2] for m in them.memory),
            "MB",
            "",
            "",
        ),
    ]
    lines = [
        f"{'row':<38}{'ours':>10}{'peer':>10}{'ratio':>8}  {'target':<14}{'peer as served':>14}",
        "-" * 96,
    ]
    for name, mine, theirs, unit, target, served in rows:
        ratio = mine / theirs if theirs else float("inf")
        verdict = f"{target}: {'met' if ratio <= 1.5 else 'not met'}" if target else ""
        if unit == "ms":
            cells = f"{ms(mine):>10}{ms(theirs):>10}"
        elif unit == "s":
            cells = f"{mine:>8.2f} s{theirs:>8.2f} s"
        else:
            cells = f"{mine:>7.0f} MB{theirs:>7.0f} MB"
        lines.append(f"{name:<38}{cells}{ratio:>7.1f}x  {verdict:<14}{served:>14}")
    processes = (median(m[0] for m in us.memory), median(m[0] for m in them.memory))
    loads = us.load + them.load
    lines += [
        "",
        f"peer: {', '.join(PINS)}; {rounds} round(s), alternating sides, each on a fresh server",
        f"processes in the trees: ours {processes[0]:.0f} (API, database, Ray and its workers), "
        f"peer {processes[1]:.0f}",
        f"peer polling taken out: each run's end moved earlier by its logged run_queue_ms "
        f"(median {ms(statistics.median(them.served['queue']))} a run, sequential runs)",
        f"load average (1 min) at the end of each side's round: {', '.join(f'{x:.1f}' for x in loads)}"
        f" on {os.cpu_count()} cores",
    ]
    return lines


async def main(args: argparse.Namespace) -> None:
    counts = (
        Counts(runs=3, batch=4, burst=10, burst_targets=2)
        if args.quick
        else Counts(runs=args.runs, batch=20, burst=100, burst_targets=10)
    )
    rounds = 1 if args.quick else args.rounds
    await asyncio.to_thread(install_peer)  # once, before any clock runs
    fake, fake_runner, fake_url = await start_fake("providerB", LATENCY_S)
    us, them = Side(), Side()
    print(f"load average before: {os.getloadavg()[0]:.1f}", flush=True)
    try:
        for index in range(rounds):
            order = [("ours", ours, us), ("peer", peer, them)]
            for name, measure, side in order if index % 2 == 0 else order[::-1]:
                started = time.perf_counter()
                await measure(counts, fake, fake_url, side)
                print(
                    f"round {index + 1} {name}: first {side.first[-1]:.2f} s, "
                    f"{counts.batch} at once {side.batch[-1]:.2f} s, {counts.burst} at once "
                    f"{side.burst[-1]:.2f} s ({time.perf_counter() - started:.0f} s, "
                    f"load {side.load[-1]:.1f})",
                    flush=True,
                )
    finally:
        await fake_runner.cleanup()
    print("\n" + "\n".join(table(counts, rounds, us, them)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=30, help="sequential runs per round for the overhead")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, each side once a round")
    parser.add_argument("--quick", action="store_true", help="tiny counts, one round: a smoke run")
    asyncio.run(main(parser.parse_args()))
