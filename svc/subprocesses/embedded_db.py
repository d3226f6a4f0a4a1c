"""The embedded MongoDB-wire server (SecantusDB) for running without a MongoDB.

The server runs as a child process on a free loopback port with its storage
under `<data_dir>/mongo` and every commit synced to disk. A second process using
the same data directory (`svc users create` beside a running `svc serve`, or a
second API process) finds the running server through `<data_dir>/mongo.json`
and shares it instead of opening the storage twice.

Lifetime: every user holds a shared lock on `<data_dir>/mongo.users` while it
uses the server, and the last one out stops it. The kernel releases the lock of
a process that dies however it dies, and a watchdog inside the server process
(`embedded_db_child.py`) stops the server as soon as nobody holds it, so the
database never outlives the processes that use it, even when they are killed
with SIGKILL or their data directory has been deleted. The server holds
`<data_dir>/mongo.server` for its whole life, so a state file left by a killed
run is recognised as stale and removed at the next start.
"""

from __future__ import annotations

import asyncio
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
from typing import IO

from svc.subprocesses.embedded_db_child import SERVER_LOCK, START_LOCK, STATE_FILE, USERS_LOCK
from svc.subprocesses.process_finder import alive

log = logging.getLogger(__name__)

LOCK_FILE = START_LOCK
# The port the data directory's server last listened on, kept across restarts: a new server
# takes it again when it is free, so connection strings handed out earlier (to actors, to
# other API processes) keep working after a restart.
PORT_FILE = "mongo.port"
STORAGE_DIR = "mongo"
START_TIMEOUT_S = 60.0
# SIGTERM first; SIGKILL after this long (commits are already synced, so nothing is lost).
STOP_TIMEOUT_S = 5.0
CHILD_SCRIPT = Path(__file__).with_name("embedded_db_child.py")


class EmbeddedServerError(RuntimeError):
    """The embedded server could not be started."""


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


class EmbeddedMongo:
    """Starts (or joins) the embedded server for one data directory, and leaves it in order."""

    def __init__(
        self, data_dir: Path, database: str = "svc", test_commands: bool = False, sync: bool = True
    ) -> None:
        self.data_dir = data_dir.resolve()
        self.database = database
        # The server's test-only commands (`configureFailPoint`): the test suite's fault injection
        # at a chosen command of a chosen client; never on for a service.
        self.test_commands = test_commands
        # Every commit on disk before it is acknowledged (SVC_EMBEDDED_DB_SYNC, docs/storage.md).
        # Without it a commit survives the server's crash but not the machine's; writes are about
        # twice as fast (bench/embedded_writes.py).
        self.sync = sync
        self.process: subprocess.Popen[bytes] | None = None
        self.port: int | None = None
        self.pid: int | None = None
        self._users: IO[str] | None = None
        self._start_lock: IO[str] | None = None
        self._log_file: IO[bytes] | None = None

    @property
    def uri(self) -> str:
        """The connection string; valid after `start`."""
        if self.port is None:
            raise EmbeddedServerError("embedded server not started")
        return uri_for(self.port, self.database)

    @property
    def owned(self) -> bool:
        """True when this object started the server (it may still outlive this object for other users)."""
        return self.process is not None

    async def start(self) -> str:
        """Join a running server for this directory, or start one; return its URI."""
        if self._users is not None:
            return self.uri
        self.data_dir.mkdir(parents=True, exist_ok=True)
        start_lock = open(self.data_dir / START_LOCK, "a")  # noqa: ASYNC230 - tiny local files
        users = open(self.data_dir / USERS_LOCK, "a")  # noqa: ASYNC230
        try:
            # The start lock makes check-then-start atomic across processes sharing the directory.
            await asyncio.to_thread(fcntl.flock, start_lock, fcntl.LOCK_EX)
            try:
                await asyncio.to_thread(fcntl.flock, users, fcntl.LOCK_SH)
                running = self._running()
                if running is not None:
                    self.pid, self.port = running
                    log.info("joined embedded database on port %s", self.port)
                else:
                    self._spawn()
                    await self._wait_ready()
                    self._write_state()
                    storage = self.data_dir / STORAGE_DIR
                    log.info("embedded database on port %s, storage %s", self.port, storage)
            finally:
                fcntl.flock(start_lock, fcntl.LOCK_UN)
        except BaseException:
            users.close()
            start_lock.close()
            await self._end_own_process()
            raise
        self._users, self._start_lock = users, start_lock
        return self.uri

    def _running(self) -> tuple[int, int] | None:
        """(pid, port) of the live server of this directory; removes a stale state file."""
        state_path = self.data_dir / STATE_FILE
        with open(self.data_dir / SERVER_LOCK, "a") as server_lock:
            try:
                fcntl.flock(server_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pass  # a server holds it: it is alive
            else:
                if state_path.exists():
                    log.warning("removed a stale %s left by a killed run", state_path)
                    state_path.unlink(missing_ok=True)
                return None
        try:
            state = json.loads(state_path.read_text())
            pid, port = int(state["pid"]), int(state["port"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if alive(pid) and _answers(port):
            return pid, port
        return None

    def _preferred_port(self) -> int:
        """The port of the directory's previous server when it is free again, else any free port."""
        try:
            port = int((self.data_dir / PORT_FILE).read_text())
            with socket.socket() as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
                sock.bind(("127.0.0.1", port))
        except (OSError, ValueError):
            return free_port()
        return port

    def _spawn(self) -> None:
        self.port = self._preferred_port()
        storage = self.data_dir / STORAGE_DIR
        args = [
            sys.executable,
            "-P",  # the script's directory stays off sys.path
            str(CHILD_SCRIPT),
            str(self.data_dir),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--storage-path",
            str(storage),
            *(["--sync-on-commit"] if self.sync else []),
            "--log-level",
            "WARNING",
            *(["--enable-test-commands"] if self.test_commands else []),
        ]
        if self._log_file is not None:
            self._log_file.close()
        self._log_file = open(self.data_dir / "mongo.log", "ab")
        # The child gets its own session, so a Ctrl-C in the terminal reaches only the API,
        # which then closes its connections and stops the server in order. It is not tied to
        # this process: other users may still need it; its watchdog follows the users lock.
        self.process = subprocess.Popen(  # noqa: S603 - fixed arguments, no shell
            args,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=self.data_dir,
        )
        self.pid = self.process.pid

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
        raise EmbeddedServerError(f"embedded database did not answer within {START_TIMEOUT_S:.0f}s")

    def _write_state(self) -> None:
        assert self.process is not None
        state = {"pid": self.process.pid, "port": self.port}
        (self.data_dir / STATE_FILE).write_text(json.dumps(state))
        (self.data_dir / PORT_FILE).write_text(str(self.port))

    async def revive(self) -> bool:
        """Start the server again if it has died while this process still uses it; True if it did.

        A server that crashed (or was killed) leaves its users answering 503 for good: the
        first user to notice starts a new one, on the same port when it is free, so every
        client (this process, other API processes, actors) reconnects by itself.
        """
        start_lock = self._start_lock
        if start_lock is None or self._users is None:
            return False
        await asyncio.to_thread(fcntl.flock, start_lock, fcntl.LOCK_EX)
        try:
            running = self._running()
            if running is not None:
                if running[1] != self.port:
                    log.warning("embedded database now on port %s (was %s)", running[1], self.port)
                self.pid, self.port = running
                return False
            previous = self.port
            if self.process is not None and self.process.poll() is not None:
                self.process = None  # reaped: the old server has exited
            self._spawn()
            await self._wait_ready()
            self._write_state()
            log.warning(
                "embedded database had stopped; started again on port %s (was %s)", self.port, previous
            )
            return True
        finally:
            fcntl.flock(start_lock, fcntl.LOCK_UN)

    async def stop(self) -> None:
        """Stop using the server; the last user stops it (SIGTERM, then SIGKILL) and waits for it."""
        users, self._users = self._users, None
        start_lock, self._start_lock = self._start_lock, None
        if users is None or start_lock is None:
            await self._end_own_process()
            return
        try:
            await asyncio.to_thread(fcntl.flock, start_lock, fcntl.LOCK_EX)
            try:
                fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.info("embedded database left running for its other users")
            else:
                await self._stop_server()
        finally:
            users.close()
            start_lock.close()
            if self._log_file is not None:
                self._log_file.close()
                self._log_file = None

    async def _stop_server(self) -> None:
        """SIGTERM the server, SIGKILL it after STOP_TIMEOUT_S, and wait until it has gone."""
        pid = self.pid
        if pid is None:
            return
        try:
            state_path = self.data_dir / STATE_FILE
            if json.loads(state_path.read_text()).get("pid") == pid:
                state_path.unlink()
        except (OSError, ValueError, AttributeError):
            pass  # already gone, with the data directory or by the server's own hand
        started = time.monotonic()
        if self.process is not None:
            await self._end_own_process()
        else:
            await _end_process(pid)
        log.debug("embedded database stopped in %.2fs", time.monotonic() - started)

    async def _end_own_process(self) -> None:
        """Stop (and reap) the server process this object started, if it still runs."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                await asyncio.to_thread(process.wait, STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log.warning("embedded database did not stop in %ss; killing it", STOP_TIMEOUT_S)
                process.kill()
                await asyncio.to_thread(process.wait)
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


async def _end_process(pid: int) -> None:
    """SIGTERM a process that is not our child, SIGKILL it after STOP_TIMEOUT_S, wait until it has gone."""
    for sig, wait_s in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, STOP_TIMEOUT_S)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not alive(pid):
                log.info("embedded database stopped")
                return
            await asyncio.sleep(0.05)
        if sig == signal.SIGTERM:
            log.warning("embedded database did not stop in %ss; killing it", STOP_TIMEOUT_S)
