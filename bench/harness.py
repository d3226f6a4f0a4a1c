"""What every benchmark needs: `svc serve` in a scratch data directory, readiness, percentiles, a
fake model on a free port, a signed-up user, and the memory of a process tree (Linux /proc)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web
from cryptography.fernet import Fernet

sys.path.insert(0, str(Path(__file__).parent.parent))

from svc.subprocesses.embedded_db import free_port
from tests.fakes.llm import FakeLLM


@dataclass(frozen=True)
class Service:
    """A running `svc serve`: its origin and its data directory."""

    base: str
    data_dir: Path
    pid: int = 0


async def wait_ready(url: str, timeout_s: float = 120) -> None:
    """Poll until the URL answers below 500."""
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(url) as response:
                    if response.status < 500:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


@asynccontextmanager
async def running_service(**env: str) -> AsyncIterator[Service]:
    """`svc serve` (embedded database, local Ray) on a free port; SVC_* overrides as keywords."""
    with tempfile.TemporaryDirectory() as data_dir:
        port = free_port()
        environment = {
            **os.environ,
            "SVC_DATA_DIR": data_dir,
            "SVC_SECRET_KEYS": Fernet.generate_key().decode(),
            **env,
        }
        environment.pop("SVC_MONGODB_URI", None)
        process = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("svc")),
                "--log-level",
                "WARNING",
                "serve",
                "--port",
                str(port),
            ],
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            await wait_ready(f"{base}/api/health")
            yield Service(base, Path(data_dir), process.pid)
        finally:
            process.terminate()
            process.wait(timeout=60)


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0 to 1) by rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def start_fake(provider: str, latency_s: float) -> tuple[FakeLLM, web.AppRunner, str]:
    """A fake model (tests/fakes/llm.py) answering after `latency_s` on a free port: the fake, its
    runner (to clean up) and the base URL its clients use (openai-chat's ends in /v1)."""
    fake = FakeLLM(provider, latency_s=latency_s, default_text="done")
    runner = web.AppRunner(fake.app())
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    root = f"http://127.0.0.1:{port}"
    return fake, runner, f"{root}/v1" if fake.wire_format == "openai-chat" else root


async def signup(session: aiohttp.ClientSession, base: str, email: str) -> str:
    """A new user signed up: the Cookie header of its session."""
    body = {"email": email, "password": "bench-password"}
    async with session.post(f"{base}/api/auth/signup", json=body) as response:
        return f"svc_session={response.cookies['svc_session'].value}"


def _status_kb(path: Path, field: str) -> float:
    try:
        for line in path.read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def rss_mb(pid: int) -> float:
    """Resident memory of one process (Linux /proc)."""
    return _status_kb(Path(f"/proc/{pid}/status"), "VmRSS:")


def pss_mb(pid: int) -> float:
    """Proportional share of memory of one process: shared pages divided among their users."""
    return _status_kb(Path(f"/proc/{pid}/smaps_rollup"), "Pss:")


def children(pid: int) -> list[int]:
    """Direct children of a process."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def process_tree(pid: int) -> list[int]:
    """A process and all its descendants."""
    tree, pending = [], [pid]
    while pending:
        current = pending.pop()
        tree.append(current)
        pending += children(current)
    return tree


def tree_memory_mb(pid: int) -> tuple[int, float, float]:
    """(processes, RSS summed, PSS summed) of a process tree: the RSS sum counts shared pages once
    per process, the PSS sum once in all."""
    pids = process_tree(pid)
    return len(pids), sum(rss_mb(p) for p in pids), sum(pss_mb(p) for p in pids)
