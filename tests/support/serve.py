"""`svc serve` as a real subprocess: its environment, start, stop, and what it leaves behind.

Each service carries a marker of its own in its environment, which every process it starts
inherits (the embedded database, a local Ray's GCS, raylet, agents and workers), so a test
can tell what it left running.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import ray

from svc.subprocesses.process_finder import MARKER_VARIABLE, ProcessInfo, marked_processes
from tests.support.waiting import wait_until

SVC = str(Path(sys.executable).with_name("svc"))
START_TIMEOUT_S = 180.0
EXIT_TIMEOUT_S = 60.0
LEFTOVER_TIMEOUT_S = 10.0


class Service:
    """A `svc serve` subprocess and the marker its process tree carries."""

    def __init__(self, data_dir: Path, secret_key: str, *, local_ray: bool, **extra_env: str) -> None:
        self.data_dir = data_dir
        self.marker = uuid.uuid4().hex
        self.env = {
            **os.environ,
            "SVC_DATA_DIR": str(data_dir),
            "SVC_SECRET_KEYS": secret_key,
            "SVC_SCHEDULER": "on" if local_ray else "off",
            MARKER_VARIABLE: self.marker,
            **extra_env,
        }
        self.env.pop("SVC_MONGODB_URI", None)
        if local_ray:
            self.env.pop("SVC_RAY_ADDRESS", None)
            self.env.pop("RAY_ADDRESS", None)
        else:
            self.env["SVC_RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
        self.process: asyncio.subprocess.Process | None = None
        self.stderr = b""
        # stderr goes to a file beside the data directory: a pipe nobody reads would fill up
        # with the debug log and block a long-running service.
        self.log_path = data_dir.parent / f"svc-{self.marker}.log"

    async def start(self, *args: str) -> str:
        """Start `svc --log-level debug serve --port 0 ARGS`; the origin it says it listens on."""
        self.process = await asyncio.create_subprocess_exec(
            SVC,
            "--log-level",
            "debug",  # lower case is accepted
            "serve",
            "--port",
            "0",
            *args,
            env=self.env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=self.log_path.open("ab"),
        )
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), START_TIMEOUT_S)
        assert line.startswith(b"listening on http://127.0.0.1:"), line
        return line.decode().split()[-1]

    async def stop(self, how: signal.Signals) -> int:
        """Send the signal and wait for the exit code; stderr is kept for the assertions."""
        assert self.process is not None
        self.process.send_signal(how)
        await asyncio.wait_for(self.process.communicate(), EXIT_TIMEOUT_S)
        self.stderr = self.log_path.read_bytes()
        assert self.process.returncode is not None
        return self.process.returncode

    async def leftovers(self) -> list[ProcessInfo]:
        """Marked processes still alive LEFTOVER_TIMEOUT_S after the call (polled); killed if any."""
        await wait_until(lambda: not marked_processes(self.marker), LEFTOVER_TIMEOUT_S)
        left = marked_processes(self.marker)
        for info in left:
            info.kill()
        return left

    def kill(self) -> None:
        """Last resort for a failed test: nothing of this service survives it."""
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
        for info in marked_processes(self.marker):
            info.kill()


async def call(
    origin: str, method: str, path: str, timeout_s: float = 60.0, **kwargs: Any
) -> tuple[int, dict[str, Any]]:
    """One HTTP request to a running service: (status, JSON body). `timeout_s` is a hang detector."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.request(method, origin + path, **kwargs) as response,
    ):
        return response.status, await response.json(content_type=None)
