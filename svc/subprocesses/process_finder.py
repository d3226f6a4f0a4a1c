"""Finding and ending the processes a service (or a test session) started.

Child processes inherit their parent's environment, and most of them keep it
(the embedded database, Ray's GCS, raylet and workers), so a unique value in one
environment variable marks a whole process tree, even after init has adopted
the orphans. Tests and `bench/lifecycle.py` use the marker to prove that
nothing outlives what started it. Linux only (it reads /proc); elsewhere it
finds nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
from dataclasses import dataclass
from pathlib import Path

MARKER_VARIABLE = "SVC_PROCESS_MARKER"
PR_SET_PDEATHSIG = 1
PROC = Path("/proc")


@dataclass(frozen=True)
class ProcessInfo:
    """One running process: its id, parent and command line."""

    pid: int
    ppid: int
    command: str

    def kill(self) -> None:
        """SIGKILL it (it may have gone already)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.pid, signal.SIGKILL)


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send `sig` to this process when its parent thread exits (Linux).

    Meant as a `preexec_fn`: it runs in the child between fork and exec, and the
    setting survives exec. A no-op where prctl is unavailable.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, sig)


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie waiting to be reaped."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return _stat(pid)[1] != "Z"
    except OSError:
        return False


def _stat(pid: int) -> tuple[int, str]:
    """(parent pid, state letter) from /proc/PID/stat; the command may contain spaces."""
    raw = (PROC / str(pid) / "stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[1]), fields[0]


def _info(pid: int) -> ProcessInfo | None:
    """The process's details, or None when it has gone or is a zombie."""
    try:
        ppid, state = _stat(pid)
        command = (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (OSError, ValueError):
        return None
    if state == "Z":
        return None
    return ProcessInfo(pid, ppid, command.strip())


def _pids() -> list[int]:
    try:
        return [int(entry.name) for entry in PROC.iterdir() if entry.name.isdigit()]
    except OSError:
        return []


def marked_processes(marker: str, exclude: frozenset[int] = frozenset()) -> list[ProcessInfo]:
    """Live processes whose environment has MARKER_VARIABLE=marker (apart from `exclude`)."""
    needle = f"{MARKER_VARIABLE}={marker}".encode()
    found = []
    for pid in _pids():
        if pid in exclude:
            continue
        try:
            environment = (PROC / str(pid) / "environ").read_bytes()
        except OSError:
            continue
        if needle in environment.split(b"\0"):
            info = _info(pid)
            if info is not None:
                found.append(info)
    return found


def descendants(root: int) -> list[ProcessInfo]:
    """Live processes below `root` in the parent tree (not those already adopted by init)."""
    children: dict[int, list[ProcessInfo]] = {}
    for pid in _pids():
        info = _info(pid)
        if info is not None:
            children.setdefault(info.ppid, []).append(info)
    found: list[ProcessInfo] = []
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child.pid)
    return found


def processes_using(path: Path) -> list[ProcessInfo]:
    """Live processes whose command line names a path under `path` (a data directory)."""
    # The path as a whole component: /tmp/pytest-1 must not match /tmp/pytest-12.
    pattern = re.compile(re.escape(str(path.resolve())) + r"(?=/|\s|$)")
    found = []
    for pid in _pids():
        info = _info(pid)
        if info is not None and pattern.search(info.command):
            found.append(info)
    return found
