"""Run a command with one embedded database shared by every test session it starts.

`make mutate` runs a fresh pytest session per mutant (mutmut forks one for each), and each
session would otherwise start its own embedded server and stop it again: about half a second
to start and two to stop, more than the money tests themselves take. Here one server is
started for the whole command; sessions join it through `SVC_TEST_MONGO_DIR` (tests/conftest.py)
and leave it running when they end (EmbeddedMongo's users lock), and it is stopped once the
command is done. Each test still gets a database of its own.

The embedded server is single-threaded: with every worker's sessions on one server, it was
the run's bottleneck (three quarters of a core while the two workers waited on it). So
`SVC_TEST_DATABASES` servers are started (default 2, one per core) and each session joins
one of them, chosen by its process id (tests/conftest.py).

    python -m tests.support.shared_db mutmut run --max-children 3
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from svc.subprocesses.embedded_db import EmbeddedMongo

VARIABLE = "SVC_TEST_MONGO_DIR"  # the servers' directories, os.pathsep between them
COUNT = "SVC_TEST_DATABASES"


async def run(command: list[str], count: int) -> int:
    with tempfile.TemporaryDirectory(prefix="svc-shared-db-") as directory:
        servers = [
            EmbeddedMongo(Path(directory) / str(n), test_commands=True, sync=False) for n in range(count)
        ]
        for server in servers:
            server.data_dir.mkdir()
        await asyncio.gather(*(server.start() for server in servers))
        try:
            env = {**os.environ, VARIABLE: os.pathsep.join(str(server.data_dir) for server in servers)}
            return await asyncio.to_thread(lambda: subprocess.call(command, env=env))
        finally:
            await asyncio.gather(*(server.stop() for server in servers))


def joined(shared: str, pid: int) -> Path:
    """The directory of the server a session with this process id joins."""
    directories = shared.split(os.pathsep)
    return Path(directories[pid % len(directories)])


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m tests.support.shared_db COMMAND [ARG...]")
    sys.exit(asyncio.run(run(sys.argv[1:], int(os.environ.get(COUNT, "2")))))


if __name__ == "__main__":
    main()
