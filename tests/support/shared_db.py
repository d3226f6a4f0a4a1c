"""Run a command with one embedded database shared by every test session it starts.

`make mutate` runs a fresh pytest session per mutant (mutmut forks one for each), and each
session would otherwise start its own embedded server and stop it again: about half a second
to start and two to stop, more than the money tests themselves take. Here one server is
started for the whole command; sessions join it through `SVC_TEST_MONGO_DIR` (tests/conftest.py)
and leave it running when they end (EmbeddedMongo's users lock), and it is stopped once the
command is done. Each test still gets a database of its own.

    python -m tests.support.shared_db mutmut run --max-children 2
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from svc.core.embedded import EmbeddedMongo

VARIABLE = "SVC_TEST_MONGO_DIR"


async def run(command: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="svc-shared-db-") as directory:
        server = EmbeddedMongo(Path(directory))
        await server.start()
        try:
            env = {**os.environ, VARIABLE: directory}
            return await asyncio.to_thread(lambda: subprocess.call(command, env=env))
        finally:
            await server.stop()


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m tests.support.shared_db COMMAND [ARG...]")
    sys.exit(asyncio.run(run(sys.argv[1:])))


if __name__ == "__main__":
    main()
