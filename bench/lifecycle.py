"""Does `svc serve` leave anything running? Start and stop it several ways and count.

Each round starts `svc serve` (embedded database, local Ray) in a scratch data
directory with a unique marker in its environment, waits until it answers,
optionally deletes the data directory (as a test's temporary directory does),
stops it with a signal, and then looks for any process that still carries the
marker (children inherit the environment, so this finds the whole tree even
after init adopted it). Leftovers are listed, then killed by pid.

    .venv/bin/python bench/lifecycle.py [--rounds N]

Prints one row per round: how the service was stopped, whether the data
directory was still there, how long the service took to exit, and what was
still running 10 s later.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from cryptography.fernet import Fernet
from harness import wait_ready  # bench/harness.py

sys.path.insert(0, str(Path(__file__).parent.parent))

from svc.subprocesses.embedded_db import free_port
from svc.subprocesses.process_finder import MARKER_VARIABLE, marked_processes

SCENARIOS: tuple[tuple[str, signal.Signals, bool], ...] = (
    ("SIGTERM", signal.SIGTERM, True),
    ("SIGINT", signal.SIGINT, True),
    ("SIGKILL", signal.SIGKILL, True),
    ("SIGTERM", signal.SIGTERM, False),
    ("SIGINT", signal.SIGINT, False),
    ("SIGKILL", signal.SIGKILL, False),
)
SETTLE_S = 10.0


def short(command: str) -> str:
    """A command line cut to its program and its most telling arguments."""
    words = command.split()
    if "secantus" in command:
        return "embedded database " + next((w for w in words if w.isdigit()), "")
    if words and words[0].startswith("ray::"):
        return words[0]
    return " ".join(Path(w).name if "/" in w else w for w in words)[:90]


async def one_round(how: signal.Signals, keep_dir: bool) -> tuple[float, list[str]]:
    """Start, stop, and return (seconds to exit, leftover processes 10 s later)."""
    marker = uuid.uuid4().hex
    data_dir = Path(tempfile.mkdtemp(prefix="svc-lifecycle-"))
    port = free_port()
    env = {
        **os.environ,
        "SVC_DATA_DIR": str(data_dir),
        "SVC_SECRET_KEYS": Fernet.generate_key().decode(),
        MARKER_VARIABLE: marker,
    }
    env.pop("SVC_MONGODB_URI", None)
    env.pop("SVC_RAY_ADDRESS", None)
    process = subprocess.Popen(
        [str(Path(sys.executable).with_name("svc")), "--log-level", "WARNING", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await wait_ready(f"http://127.0.0.1:{port}/api/health")
        if not keep_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
        started = time.monotonic()
        process.send_signal(how)
        try:
            await asyncio.to_thread(process.wait, 60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        took = time.monotonic() - started
        deadline = time.monotonic() + SETTLE_S
        left = marked_processes(marker)
        while left and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            left = marked_processes(marker)
        names = [f"{p.pid} {short(p.command)}" for p in left]
        for leftover in left:
            leftover.kill()
        return took, names
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        shutil.rmtree(data_dir, ignore_errors=True)


async def main() -> None:
    """Run the scenarios and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="times to run each scenario")
    parser.add_argument("--only", choices=["SIGTERM", "SIGINT", "SIGKILL"], help="one way of stopping")
    args = parser.parse_args()
    print(f"{'signal':8} {'data dir':8} {'exit s':>7}  left after {SETTLE_S:.0f} s")
    total = 0
    for _ in range(args.rounds):
        for name, how, keep_dir in SCENARIOS:
            if args.only and name != args.only:
                continue
            took, left = await one_round(how, keep_dir)
            total += len(left)
            kept = "kept" if keep_dir else "removed"
            print(f"{name:8} {kept:8} {took:7.1f}  {len(left)}", flush=True)
            for line in left:
                print(f"{'':26}{line}", flush=True)
    print(f"total processes left: {total}")


if __name__ == "__main__":
    asyncio.run(main())
