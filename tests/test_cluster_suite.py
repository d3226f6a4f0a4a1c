"""Runs tests/test_cluster.py in a pytest process of its own.

The cluster scenarios build a multi-node `ray.cluster_utils.Cluster` inside the test process;
Ray keeps one key-value client and one address per process, so building and removing that
cluster would cut the suite's own (session) Ray connection. A separate process keeps the two
apart; its own end-of-session check still fails it when it leaves a process behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.test_cluster import OWN_PROCESS_VARIABLE

CLUSTER_TESTS = Path(__file__).with_name("test_cluster.py")
TIMEOUT_S = 1200


def test_the_cluster_scenarios_pass_in_their_own_process(tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
        f"--basetemp={tmp_path / 'run'}", str(CLUSTER_TESTS),
    ]  # fmt: skip
    env = {**os.environ, OWN_PROCESS_VARIABLE: "1"}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    summary = result.stdout.strip().splitlines()[-1:] if result.stdout.strip() else []
    assert result.returncode == 0, result.stdout[-12000:] + result.stderr[-4000:]
    assert summary and " passed" in summary[0] and "skipped" not in summary[0], summary
