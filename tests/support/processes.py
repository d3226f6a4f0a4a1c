"""Processes a test starts and stops itself: `svc serve` API processes, a fake server on a thread.

Every process is stopped by its own PID (never by name), and waited for, so a module leaves
nothing behind (tests/leftovers.py checks the session).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from svc.subprocesses.embedded_db import free_port
from tests.support.waiting import wait_until_sync


@dataclass
class ApiProcess:
    """One `svc serve` subprocess: its origin, its PID and where its log goes."""

    base: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        """What the process wrote (for assertion messages)."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout_s: float = 60.0) -> None:
        """SIGTERM (the ordered shut-down), then SIGKILL if it does not end in time."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start_api(
    env: dict[str, str], log_dir: Path, name: str, ready_timeout_s: float = 180.0, attempts: int = 1
) -> ApiProcess:
    """Start `svc serve` on a free port with `env` over this process's environment; wait until
    `GET /api/health` answers 200 (the database and Ray both reachable). A process that exits
    during start-up is started again, up to `attempts` times (a Ray Client's first connection
    can be refused while the head is still busy starting the previous client's server)."""
    for attempt in range(1, attempts + 1):
        try:
            return _start_api(env, log_dir, f"{name}-{attempt}", ready_timeout_s)
        except ExitedEarly:
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


class ExitedEarly(RuntimeError):
    """The process ended before it was healthy."""


def _start_api(env: dict[str, str], log_dir: Path, name: str, ready_timeout_s: float) -> ApiProcess:
    port = free_port()
    log_path = log_dir / f"{name}.log"
    command = [
        str(Path(sys.executable).with_name("svc")),
        "--log-level",
        "INFO",
        "serve",
        "--port",
        str(port),
    ]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)
    api = ApiProcess(f"http://127.0.0.1:{port}", process, log_path)

    def healthy() -> bool:
        if process.poll() is not None:
            raise ExitedEarly(f"{name} exited with {process.returncode}:\n{api.log()[-4000:]}")
        try:
            with urllib.request.urlopen(f"{api.base}/api/health", timeout=5) as answer:  # noqa: S310
                return answer.status == 200
        except (urllib.error.URLError, OSError):
            return False

    if wait_until_sync(healthy, ready_timeout_s, interval_s=0.3):
        return api
    api.stop()
    raise RuntimeError(f"{name} did not become healthy:\n{api.log()[-4000:]}")


@dataclass
class ThreadServer:
    """An aiohttp application served on its own thread and event loop, so a module-scoped fake
    outlives each test's event loop."""

    app: web.Application
    port: int = field(default_factory=free_port)
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _runner: web.AppRunner | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        ready = threading.Event()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._runner = web.AppRunner(self.app)
            loop.run_until_complete(self._runner.setup())
            loop.run_until_complete(web.TCPSite(self._runner, "127.0.0.1", self.port).start())
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=serve, name="thread-server", daemon=True)
        self._thread.start()
        if not ready.wait(30):
            raise RuntimeError("the thread server did not start")

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
