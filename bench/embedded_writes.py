"""The embedded database's write cost as its retryable-write records pile up.

    .venv/bin/python bench/embedded_writes.py [--blocks 14] [--block 1000]

Every write a driver sends with retryable writes on (PyMongo's default) leaves a record in
SecantusDB for 30 minutes. Its own prune scans all of them on every write, and past 10,000
sorts them all; `svc/subprocesses/embedded_db_child.py` replaces it with one that drops from the oldest
end. This runs the same upserts against SecantusDB as its own command line starts it and as
the service starts it (`EmbeddedMongo`), one block after another, and prints the mean time of
a write per block: flat with the service's prune, stepping up past 10,000 with the library's.
A last column starts it without an fsync per commit (SVC_EMBEDDED_DB_SYNC=false, as the test
suite runs it): the price of that durability.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pymongo import AsyncMongoClient

from svc.subprocesses.embedded_db import EmbeddedMongo, free_port


async def blocks(port: int, count: int, size: int) -> list[float]:
    """Milliseconds per upsert, one figure per block of `size`."""
    client: AsyncMongoClient = AsyncMongoClient("127.0.0.1", port)
    counters = client["bench"]["counters"]
    figures = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            for n in range(size):
                await counters.update_one({"_id": n % 10}, {"$inc": {"n": 1}}, upsert=True)
            figures.append((time.perf_counter() - started) * 1000 / size)
    finally:
        await client.close()
    return figures


async def library(count: int, size: int) -> list[float]:
    """SecantusDB started by its own command line: the library's prune."""
    with tempfile.TemporaryDirectory() as directory:
        port = free_port()
        command = [sys.executable, "-m", "secantus", "--host", "127.0.0.1", "--port", str(port)]
        options = ["--storage-path", directory, "--sync-on-commit", "--log-level", "WARNING"]
        server = subprocess.Popen([*command, *options])
        try:
            # The first write waits for the server (the client's server selection, 30 s).
            return await blocks(port, count, size)
        finally:
            server.terminate()
            server.wait(10)


async def service(count: int, size: int, sync: bool = True) -> list[float]:
    """SecantusDB started as the service starts it: the prune from the oldest end."""
    with tempfile.TemporaryDirectory() as directory:
        server = EmbeddedMongo(Path(directory), sync=sync)
        await server.start()
        try:
            assert server.port is not None
            return await blocks(server.port, count, size)
        finally:
            await server.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=14)
    parser.add_argument("--block", type=int, default=1000)
    args = parser.parse_args()
    theirs = await library(args.blocks, args.block)
    ours = await service(args.blocks, args.block)
    unsynced = await service(args.blocks, args.block, sync=False)
    print(
        f"{'writes so far':>14} | {'library prune ms/write':>22} | {'service prune ms/write':>22}"
        f" | {'no fsync ms/write':>17}"
    )
    print(f"{'-' * 14}-+-{'-' * 22}-+-{'-' * 22}-+-{'-' * 17}")
    for n, (a, b, c) in enumerate(zip(theirs, ours, unsynced, strict=True)):
        print(f"{(n + 1) * args.block:>14,} | {a:>22.2f} | {b:>22.2f} | {c:>17.2f}")


if __name__ == "__main__":
    asyncio.run(main())
