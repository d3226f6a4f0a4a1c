"""Crash points: where a test may cut an install's actor dead in the middle of a run.

A run is claimed; its steps are stored one write each; its end is one write, then its settlement,
then the callback's first attempt (svc/runtime/settlement.py). To show that no crash between them
loses or doubles anything, the test suite names points (`SVC_CRASH_POINTS`, a test hook: empty,
and so inert, in any deployment) at which the actor's process exits at once, as a SIGKILL would
leave it. Each point fires once per data directory (a marker file), so the copy Ray starts next
runs through it and finishes the job.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

POINTS = frozenset({"before-claim", "before-end", "after-end", "after-settlement", "after-step"})


class CrashPoints:
    """The points this process dies at (once each)."""

    def __init__(self, points: frozenset[str] = frozenset(), marker_dir: Path | None = None) -> None:
        self.points = points & POINTS
        self.marker_dir = marker_dir

    def reached(self, point: str) -> None:
        """Die here if a test asked for it and this point has not fired yet."""
        if point not in self.points or self.marker_dir is None:
            return
        marker = self.marker_dir / f"crashed-{point}"
        try:
            self.marker_dir.mkdir(parents=True, exist_ok=True)
            marker.touch(exist_ok=False)
        except FileExistsError:
            return
        log.warning("crash point %s reached: exiting as a killed process would", point)
        os._exit(137)
