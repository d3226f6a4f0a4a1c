"""`make mutate`: mutmut over one embedded database held for the whole run.

mutmut runs each mutant's tests in a pytest session of its own (a fork per mutant), and a
session that uses the database would start an embedded server and stop it again: about
0.7 s to start and 2 s to stop, most of a database-backed mutant's cost. This script starts
one server in a private directory, names it to the test sessions in SVC_TEST_MONGO_DIR (the
`mongo_port` fixture in tests/conftest.py joins it and leaves it running, as this script
still uses it), runs `mutmut run` with the arguments given, prints the results, and stops
the server. Each test still gets a database of its own on it.

Usage: python scripts/mutate.py [--max-children N] [MUTANT_NAME_PATTERN ...]
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from svc.core import EmbeddedMongo

SHARED_DIR_VARIABLE = "SVC_TEST_MONGO_DIR"


def main(arguments: list[str]) -> int:
    """Run mutmut with the shared database; mutmut's exit code."""
    mutmut = str(Path(sys.executable).parent / "mutmut")
    with tempfile.TemporaryDirectory(prefix="svc-mutate-db-") as directory:
        server = EmbeddedMongo(Path(directory))
        asyncio.run(server.start())
        try:
            env = {**os.environ, SHARED_DIR_VARIABLE: directory}
            code = subprocess.call([mutmut, "run", *arguments], env=env)  # noqa: S603 - no shell
            subprocess.call([mutmut, "results"], env=env)  # noqa: S603 - fixed arguments
        finally:
            asyncio.run(server.stop())
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
