"""Ends the processes of a local Ray when the process that started it has gone.

A local Ray started by `ray.init()` ties its GCS and raylet to the driver, but
the raylet's own children (workers, the dashboard and runtime-env agents) only
notice its death later (tens of seconds on a busy machine). The service starts
this small watcher beside the local Ray: the service marks Ray's processes with
a token in their environment and keeps the write end of a pipe whose read end
only this watcher has. When the service exits, however it exits (SIGKILL
included), the pipe reaches end-of-file and the watcher kills every process that
carries the token, then exits.

Run as a script (`python -P ray_reaper.py TOKEN FD`): it imports only the standard library.
"""

from __future__ import annotations

import contextlib
import os
import select
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
SCAN_S = 1.0


Identity = tuple[int, str]  # (pid, start time in clock ticks): a reused pid is another process


def _read(pid: int, name: str) -> bytes | None:
    """A file of /proc/<pid>, or None when the process has gone. A plain `open` of bytes: the
    watcher reads two files of every process each SCAN_S, on a machine with hundreds, and
    `Path.read_text` costs about a third more."""
    try:
        with open(f"{PROC}/{pid}/{name}", "rb") as file:  # a string: a Path per read costs more
            return file.read()
    except OSError:
        return None


def _stat(pid: int) -> tuple[int, str, str] | None:
    """(parent pid, state, start time) of a process, or None when it has gone."""
    raw = _read(pid, "stat")
    if raw is None:
        return None
    fields = raw[raw.rindex(b")") + 2 :].split()
    return int(fields[1]), fields[0].decode(), fields[19].decode()


def family(token: str) -> set[Identity]:
    """Live processes whose environment has TOKEN_VARIABLE=token, and all their descendants."""
    needle = f"{TOKEN_VARIABLE}={token}".encode()
    roots: set[int] = set()
    children: dict[int, list[int]] = {}
    stats: dict[int, tuple[int, str, str]] = {}
    me = os.getpid()
    for name in os.listdir(PROC):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        stat = _stat(pid)
        if stat is None or stat[1] == "Z":
            continue
        stats[pid] = stat
        children.setdefault(stat[0], []).append(pid)
        environ = _read(pid, "environ")
        if environ is not None and needle in environ.split(b"\0"):
            roots.add(pid)
    found: set[Identity] = set()
    stack = list(roots)
    while stack:
        pid = stack.pop()
        if (pid, stats[pid][2]) in found:
            continue
        found.add((pid, stats[pid][2]))
        stack.extend(children.get(pid, []))
    return found


def _alive(identity: Identity) -> bool:
    """True while that very process (same pid and start time) runs and is not a zombie."""
    stat = _stat(identity[0])
    return stat is not None and stat[1] != "Z" and stat[2] == identity[1]


def reap(token: str, seen: set[Identity]) -> int:
    """Kill `seen` and the token's processes (with their descendants) until none has been found
    for QUIET_S (a dying raylet may still be starting one), within SETTLE_S; the number killed.

    `seen` holds what earlier scans found: a process whose title rewrite has clobbered its
    environment, or whose parent died first, is still ended."""
    killed: set[Identity] = set()
    started = last_seen = time.monotonic()
    pending = {identity for identity in seen if _alive(identity)}
    while time.monotonic() - started < SETTLE_S and time.monotonic() - last_seen < QUIET_S:
        pending |= family(token)
        pending = {identity for identity in pending if _alive(identity)}
        if pending:
            last_seen = time.monotonic()
        for identity in pending:
            try:
                os.kill(identity[0], signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
            killed.add(identity)
        time.sleep(0.05)
    return len(killed)


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
    seen: set[Identity] = set()
    while True:
        # Look every SCAN_S while the service lives, so the processes are known before they can hide.
        ready, _, _ = select.select([fd], [], [], SCAN_S)
        if ready and not os.read(fd, 4096):
            break
        seen = {identity for identity in seen if _alive(identity)} | family(token)
    reap(token, seen)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
