"""Running the `svc` console script in the test's own process.

`api.cli.main` is the console script; calling it directly skips a subprocess's start-up (seconds
of imports). It configures logging for a command-line run (JSON lines on stderr), so the root
logger's handlers and levels are put back afterwards: later tests keep pytest's own capture.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from api.cli import main

KEPT = ("", "pymongo", "aiohttp.access")


def run_cli(argv: Sequence[str]) -> int:
    """`svc ARGV` in this process; its exit status (argparse's SystemExit is left to the caller)."""
    loggers = [logging.getLogger(name) for name in KEPT]
    saved = [(logger.handlers[:], logger.level, logger.disabled) for logger in loggers]
    try:
        return main(list(argv))
    finally:
        for logger, (handlers, level, disabled) in zip(loggers, saved, strict=True):
            logger.handlers[:] = handlers
            logger.setLevel(level)
            logger.disabled = disabled
