"""Scheduler benchmark: 1,000 enabled schedules due in the same minute.

    .venv/bin/python bench/scheduler.py [--schedules 1000]

Runs the scheduler's tick (the code the Scheduler actor runs every second) against
the embedded database holding the schedules, with a runtime port that records
when each run is handed over instead of starting 1,000 actors. Prints the time
from due to run start (p50/p99), and the CPU the scheduler uses per idle tick
with all schedules enabled and none due.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent))

from harness import percentile  # bench/harness.py

from svc.core.store import Store
from svc.runtime.schedule_fires import SchedulerCore
from svc.subprocesses.embedded_db import EmbeddedMongo


class RecordingRuntime:
    """A runtime port that notes when each run is handed over."""

    def __init__(self) -> None:
        self.started: list[float] = []

    async def ping(self) -> bool:
        return True

    async def run(self, install_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError("the scheduler only submits")  # pragma: no cover

    async def submit(self, install_id: str, payload: dict[str, Any]) -> None:
        self.started.append(time.time())

    async def cancel(self, install_id: str, run_id: str) -> dict[str, Any]:
        return {"cancelled": False, "step": None}

    async def resume(self, install_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError("the scheduler only submits")  # pragma: no cover


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as data_dir:
        server = EmbeddedMongo(Path(data_dir))
        store = Store.connect(await server.start())
        try:
            await store.ensure_indexes()
            due = datetime.now(UTC).replace(microsecond=0)
            installs = [{"_id": f"i{n}", "status": "completed"} for n in range(args.schedules)]
            schedules = [
                {
                    "_id": f"i{n}",
                    "cronExpression": "* * * * *",
                    "timezone": "UTC",
                    "enabled": True,
                    "onBacklog": "skip",
                    "bypassGates": False,
                    "label": None,
                    "lastRunAt": None,
                    "nextRunAt": due,
                }
                for n in range(args.schedules)
            ]
            for start in range(0, args.schedules, 500):
                await store.installs.insert_many(installs[start : start + 500])
                await store["schedules"].insert_many(schedules[start : start + 500])
            runtime = RecordingRuntime()
            core = SchedulerCore(store, runtime)  # type: ignore[arg-type]
            # The scheduler ticks every second, so a fire is seen at most 1 s after it is due;
            # measured here: from the tick that sees them due to each run being handed over.
            tick_started = time.time()
            fired = await core.tick(due + timedelta(seconds=1))
            delays = [started - tick_started for started in runtime.started]
            cpu_started = time.process_time()
            idle_ticks = 20
            for _ in range(idle_ticks):
                await core.tick()
            cpu_per_tick_ms = (time.process_time() - cpu_started) / idle_ticks * 1000
        finally:
            await store.close()
            await server.stop()
    print(f"\n{'measurement':<44}{'result'}")
    print("-" * 72)
    print(f"{'schedules due in the same minute':<44}{args.schedules} (fired {fired})")
    print(f"{'due (tick) -> run handed over, p50':<44}{percentile(delays, 0.5) * 1000:.0f} ms")
    print(f"{'due (tick) -> run handed over, p99':<44}{percentile(delays, 0.99) * 1000:.0f} ms")
    print(
        f"{'scheduler CPU per idle tick (1 tick/s)':<44}{cpu_per_tick_ms:.2f} ms "
        f"({cpu_per_tick_ms / 10:.2f}% of a core)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--schedules", type=int, default=1000)
    asyncio.run(main(parser.parse_args()))
