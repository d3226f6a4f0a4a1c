"""The embedded MongoDB-wire server (SecantusDB) for running without a MongoDB.

The server runs as a child process on a free loopback port with its storage
under `<data_dir>/mongo` and every commit synced to disk. The child is tied to
its parent (PR_SET_PDEATHSIG on Linux), so it never outlives an API process that
dies. A second process using the same data directory (`svc users create` beside
a running `svc serve`, or a second API process) finds the running server through
`<data_dir>/mongo.json` and shares it instead of opening the storage twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)

STATE_FILE = "mongo.json"
LOCK_FILE = "mongo.lock"
STORAGE_DIR = "mongo"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
PR_SET_PDEATHSIG = 1
LAUNCHER = "import sys; from secantus.cli import main; sys.exit(main())"


class EmbeddedServerError(RuntimeError):
    """The embedded server could not be started."""


def _die_with_parent() -> None:
    """Runs in the child before exec: ask the kernel for SIGTERM when the parent dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def uri_for(port: int, database: str = "svc") -> str:
    """Connection string of a local server (direct: it is a single node)."""
    return f"mongodb://127.0.0.1:{port}/{database}?directConnection=true"


def _answers(port: int) -> bool:
    """True when something accepts TCP connections on the port."""
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class EmbeddedMongo:
    """Starts (or joins) the embedded server for one data directory."""

    def __init__(self, data_dir: Path, database: str = "svc") -> None:
        self.data_dir = data_dir.resolve()
        self.database = database
        self.process: subprocess.Popen[bytes] | None = None
        self.port: int | None = None

    @property
    def uri(self) -> str:
        """The connection string; valid after `start`."""
        if self.port is None:
            raise EmbeddedServerError("embedded server not started")
        return uri_for(self.port, self.database)

    @property
    def owned(self) -> bool:
        """True when this object started the server (and so stops it)."""
        return self.process is not None

    async def start(self) -> str:
        """Join a running server for this directory, or start one; return its URI."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.data_dir / LOCK_FILE, "w") as lock:  # noqa: ASYNC230 - a tiny local file
            # The lock makes check-then-start atomic across processes sharing the directory.
            await asyncio.to_thread(fcntl.flock, lock, fcntl.LOCK_EX)
            try:
                running = self._running_port()
                if running is not None:
                    self.port = running
                    log.info("joined embedded database on port %s", running)
                    return self.uri
                self._spawn()
                await self._wait_ready()
                self._write_state()
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        log.info("embedded database on port %s, storage %s", self.port, self.data_dir / STORAGE_DIR)
        return self.uri

    def _running_port(self) -> int | None:
        state_path = self.data_dir / STATE_FILE
        try:
            state = json.loads(state_path.read_text())
            pid, port = int(state["pid"]), int(state["port"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if _alive(pid) and _answers(port):
            return port
        state_path.unlink(missing_ok=True)
        return None

    def _spawn(self) -> None:
        self.port = free_port()
        storage = self.data_dir / STORAGE_DIR
        args = [
            sys.executable,
            "-c",
            LAUNCHER,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--storage-path",
            str(storage),
            "--sync-on-commit",
            "--log-level",
            "WARNING",
        ]
        self._log_file = open(self.data_dir / "mongo.log", "ab")
        # The child gets its own session, so a Ctrl-C in the terminal reaches only the API,
        # which then closes its connections and stops the server in order.
        self.process = subprocess.Popen(  # noqa: S603 - fixed arguments, no shell
            args,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
            cwd=self.data_dir,
        )

    async def _wait_ready(self) -> None:
        assert self.process is not None and self.port is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise EmbeddedServerError(
                    f"embedded database exited with code {self.process.returncode}; "
                    f"see {self.data_dir / 'mongo.log'}"
                )
            if _answers(self.port):
                return
            await asyncio.sleep(0.05)
        await self.stop()
        raise EmbeddedServerError(f"embedded database did not answer within {START_TIMEOUT_S:.0f}s")

    def _write_state(self) -> None:
        assert self.process is not None
        state = {"pid": self.process.pid, "port": self.port}
        (self.data_dir / STATE_FILE).write_text(json.dumps(state))

    async def stop(self) -> None:
        """Stop the server if this object started it (SIGTERM, then SIGKILL)."""
        process, self.process = self.process, None
        if process is None:
            return
        (self.data_dir / STATE_FILE).unlink(missing_ok=True)
        if process.poll() is None:
            process.terminate()
            try:
                await asyncio.to_thread(process.wait, STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log.warning("embedded database did not stop in %ss; killing it", STOP_TIMEOUT_S)
                process.kill()
                await asyncio.to_thread(process.wait)
        self._log_file.close()
        log.info("embedded database stopped")


class NoDatabaseError(EmbeddedServerError):
    """An operator command pointed at a data directory that holds no database."""


def require_database(data_dir: Path) -> None:
    """Refuse to go on when `data_dir` has neither a running embedded server nor stored data.

    Operator commands (`svc users create`, ...) join the server `svc serve` runs, or open its
    storage; run against the wrong directory they would otherwise start a new, empty database
    and write the account where no service will ever read it.
    """
    directory = data_dir.resolve()
    if (directory / STATE_FILE).is_file():
        return
    storage = directory / STORAGE_DIR
    if storage.is_dir() and any(storage.iterdir()):
        return
    raise NoDatabaseError(
        f"no database in {directory}: start `svc serve` first, or point SVC_DATA_DIR "
        "(or SVC_MONGODB_URI) at the service's database"
    )
