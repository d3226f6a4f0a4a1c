"""Ends the processes of a local Ray when the process that started it has gone.

A local Ray started by `ray.init()` ties its GCS and raylet to the driver, but
the raylet's own children (workers, the dashboard and runtime-env agents) only
notice its death later (tens of seconds on a busy machine). The service starts
this small watcher beside the local Ray: the service marks Ray's processes with
a token in their environment and keeps the write end of a pipe whose read end
only this watcher has. When the service exits, however it exits (SIGKILL
included), the pipe reaches end-of-file and the watcher kills every process that
carries the token, then exits.

Run as a script (`python -P reaper.py TOKEN FD`): it imports only the standard library.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

TOKEN_VARIABLE = "SVC_RAY_TOKEN"
PROC = Path("/proc")
SETTLE_S = 5.0
QUIET_S = 1.0


def carriers(token: str) -> list[int]:
    """Pids of live processes whose environment has TOKEN_VARIABLE=token."""
    needle = f"{TOKEN_VARIABLE}={token}".encode()
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def reap(token: str) -> int:
    """Kill the token's processes until none has been seen for QUIET_S (a dying raylet may still
    be starting one), within SETTLE_S; the number killed."""
    killed: set[int] = set()
    started = last_seen = time.monotonic()
    while time.monotonic() - started < SETTLE_S and time.monotonic() - last_seen < QUIET_S:
        pids = [pid for pid in carriers(token) if pid not in killed or _running(pid)]
        if pids:
            last_seen = time.monotonic()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)
    return len(killed)


def _running(pid: int) -> bool:
    """True unless the process has gone or is a zombie."""
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return False
    return raw[raw.rindex(")") + 2 :].split()[0] != "Z"


class Reaper:
    """The watcher of one local Ray, seen from the service.

    Start it before `ray.init()`, start Ray inside `marking()` so that Ray's
    processes inherit the token, and `close()` it after `ray.shutdown()`: the
    watcher then kills any straggler and exits. If the service dies first, the
    kernel closes the pipe and the watcher does the same on its own.
    """

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex
        read, self._write = os.pipe()
        try:
            self.process = subprocess.Popen(  # noqa: S603 - fixed arguments, no shell
                [sys.executable, "-P", str(Path(__file__)), self.token, str(read)],
                pass_fds=(read,),
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            os.close(read)

    @contextlib.contextmanager
    def marking(self) -> Iterator[None]:
        """Within the block, processes started from here carry the token."""
        previous = os.environ.get(TOKEN_VARIABLE)
        os.environ[TOKEN_VARIABLE] = self.token
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop(TOKEN_VARIABLE, None)
            else:
                os.environ[TOKEN_VARIABLE] = previous

    def close(self) -> None:
        """Let the watcher reap what is left and wait for it to exit."""
        if self._write < 0:
            return
        os.close(self._write)
        self._write = -1
        try:
            self.process.wait(SETTLE_S + 5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def main(argv: list[str]) -> int:
    """Wait for end-of-file on the pipe, then reap the token's processes."""
    token, fd = argv[0], int(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the service's to handle
    while os.read(fd, 4096):
        pass
    reap(token)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
