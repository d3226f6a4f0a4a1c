"""The end-of-session check: the test suite leaves no process running.

At start-up the session puts a unique marker in its environment, so every
process it starts (embedded databases, local Ray and its workers, `svc`
subprocesses, fake servers run as programs) carries it, even after init has
adopted it. When the session ends, after every fixture has been torn down, any
marked process still alive after a short grace, or any process whose command
line names the session's temporary directory, fails the run: it is listed,
then killed so that it does not outlive the run either.
"""

from __future__ import annotations

import os
import uuid

import pytest

from svc.subprocesses.process_finder import MARKER_VARIABLE, ProcessInfo, marked_processes, processes_using
from tests.support.waiting import wait_until_sync

MARKER = pytest.StashKey[str]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """How long finished processes may take to exit (the check's own test shortens it)."""
    parser.addini("leftover_grace_seconds", "seconds a process may take to exit at the end", default="10")


def pytest_configure(config: pytest.Config) -> None:
    """Mark this session's processes (a nested session keeps its own marker)."""
    config.stash[MARKER] = uuid.uuid4().hex
    os.environ[MARKER_VARIABLE] = config.stash[MARKER]


def leftovers(session: pytest.Session) -> list[ProcessInfo]:
    """Processes started by this session that are still alive (not this process)."""
    me = frozenset({os.getpid()})
    found = {info.pid: info for info in marked_processes(session.config.stash[MARKER], exclude=me)}
    factory = getattr(session.config, "_tmp_path_factory", None)
    basetemp = getattr(factory, "_basetemp", None)  # set only when a test asked for a temporary path
    if basetemp is not None:
        found.update({info.pid: info for info in processes_using(basetemp) if info.pid not in me})
    return list(found.values())


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when a process it started outlives it (after GRACE_S for slow exits)."""
    if MARKER not in session.config.stash:
        return
    grace_s = float(session.config.getini("leftover_grace_seconds"))
    left = leftovers(session)
    if left:  # slow exits get the grace period, re-checked until nothing is left
        wait_until_sync(lambda: not leftovers(session), grace_s, interval_s=0.2)
        left = leftovers(session)
    if not left:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"{len(left)} process(es) started by the test session still running {grace_s:g}s after it:"]
    lines += [f"  pid {info.pid} (parent {info.ppid}): {info.command[:160]}" for info in left]
    for info in left:
        info.kill()
    if reporter is not None:
        reporter.write_sep("=", "processes left running", red=True)
        for line in lines:
            reporter.write_line(line)
    else:
        print("\n".join(lines))
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
