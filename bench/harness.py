"""What every benchmark needs: `svc serve` in a scratch data directory, readiness, percentiles."""

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
from cryptography.fernet import Fernet

sys.path.insert(0, str(Path(__file__).parent.parent))

from svc.core.embedded import free_port


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
