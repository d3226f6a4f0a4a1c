"""SSE relay benchmark: time to first chunk and the latency each chunk gains through our relay.

    .venv/bin/python bench/sse.py [--chunks 500] [--runs 10]

A fake providerA (from tests/fakes) streams a 500-word answer with a pause between
chunks (2 ms by default: 500 chunks/s; --pause-ms 20 is a typical model's pace).
`svc serve` (embedded database, local Ray) relays it through POST
/api/templates/test-chat. The fake runs in this process and notes when it wrote
each chunk, so the added latency of a chunk is its arrival here minus its write
there; time to first chunk is also shown for the fake read directly.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).parent.parent))
sys.path.insert(0, str(Path(__file__).parent))
from harness import percentile, running_service  # bench/harness.py

from svc.subprocesses.embedded_db import free_port
from tests.fakes.llm import DEFAULT_KEY, FakeLLM


def _text_of(data: object) -> str | None:
    """The text a fake Anthropic stream event carries, if any."""
    if isinstance(data, dict):
        delta = data.get("delta")
        if isinstance(delta, dict):
            return delta.get("text")
    return None


async def timed_lines(response: aiohttp.ClientResponse, started: float) -> list[float]:
    """Arrival time (since start) of every text chunk in the stream."""
    times = []
    async for raw in response.content:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        payload = json.loads(line[6:])
        text = payload.get("chunk") or (payload.get("delta") or {}).get("text")
        if text:
            times.append(time.perf_counter() - started)
    return times


async def main(args: argparse.Namespace) -> None:
    fake = FakeLLM("providerA", chunk_delay_s=args.pause_ms / 1000)
    runner = web.AppRunner(fake.app())
    await runner.setup()
    fake_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", fake_port).start()
    text = " ".join(f"w{n}" for n in range(args.chunks))
    firsts_direct, firsts_relay, added = [], [], []
    try:
        async with running_service(
            SVC_RATE_LIMITS="off",
            SVC_SCHEDULER="off",
            SVC_PROVIDERA_API_KEY=DEFAULT_KEY,
            SVC_PROVIDERA_BASE_URL=f"http://127.0.0.1:{fake_port}",
        ) as service:
            base = service.base
            async with aiohttp.ClientSession() as session:
                async with session.post(
                    f"{base}/api/auth/signup", json={"email": "b@example.com", "password": "bench-password"}
                ) as r:
                    cookie = f"svc_session={r.cookies['svc_session'].value}"
                async with session.post(f"{base}/api/auth/keys", json={}, headers={"Cookie": cookie}) as r:
                    key = (await r.json())["key"]
                definition = {
                    "agents": [{"key": "lead", "name": "Lead", "model": "providerA:small", "prompt": "x"}]
                }
                body = {"definition": definition, "messages": [{"role": "user", "content": "go"}]}
                direct_body = {
                    "model": "providerA-small",
                    "max_tokens": 10,
                    "stream": True,
                    "messages": [{"role": "user", "content": "go"}],
                }
                for _ in range(args.runs + 1):
                    fake.script(text=text)
                    started = time.perf_counter()
                    async with session.post(
                        f"http://127.0.0.1:{fake_port}/v1/messages",
                        json=direct_body,
                        headers={"x-api-key": DEFAULT_KEY, "anthropic-version": "2023-06-01"},
                    ) as r:
                        direct = await timed_lines(r, started)
                    fake.script(text=text)
                    started = time.perf_counter()
                    async with session.post(
                        f"{base}/api/templates/test-chat",
                        json=body,
                        headers={"Authorization": f"Bearer {key}"},
                    ) as r:
                        relayed = await timed_lines(r, started)
                    if _ == 0:
                        continue  # warm-up
                    firsts_direct.append(direct[0] * 1000)
                    firsts_relay.append(relayed[0] * 1000)
                    written = [t for t, data in fake.sent[-len(direct) * 3 :] if _text_of(data)]
                    added += [
                        (started + b - a) * 1000
                        for a, b in zip(written[-len(relayed) :], relayed, strict=False)
                    ]
    finally:
        await runner.cleanup()
    print(f"\n{args.chunks} chunks x {args.runs} runs, {args.pause_ms:g} ms between upstream chunks\n")
    print(f"{'measurement':<44}{'p50':>10}{'p99':>10}")
    print("-" * 64)
    print(
        f"{'first chunk, straight from the fake (ms)':<44}{percentile(firsts_direct, 0.5):>10.1f}"
        f"{percentile(firsts_direct, 0.99):>10.1f}"
    )
    print(
        f"{'first chunk, through the relay (ms)':<44}{percentile(firsts_relay, 0.5):>10.1f}"
        f"{percentile(firsts_relay, 0.99):>10.1f}"
    )
    print(
        f"{'added latency per chunk after the first (ms)':<44}{percentile(added, 0.5):>10.2f}"
        f"{percentile(added, 0.99):>10.2f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--chunks", type=int, default=500)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--pause-ms", type=float, default=2.0, help="pause between upstream chunks")
    asyncio.run(main(parser.parse_args()))
