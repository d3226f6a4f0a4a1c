"""The longest test files start first, so the two test processes end together.

`make test` hands whole files to its processes (pytest-xdist `--dist loadfile`, with
`--no-loadscope-reorder` so xdist keeps this order instead of putting the files with the most
tests first). A file of one long test (the cluster scenarios, the live Paperclip) handed out
last would run on after the other process has finished: started first, it runs beside the
many short files. The rest keep pytest-randomly's order.

The figures are each file's seconds in a fresh-clone `make test` (the junit times, set-up
included), rounded; only their order matters. Refresh them when `--durations` shows a new
long file: `tests/test_heavy_first.py` checks that each one still exists.
"""

from __future__ import annotations

import pytest

HEAVY_FILES: dict[str, int] = {
    "tests/test_paperclip_live.py": 250,  # installs and starts Paperclip once for its two tests
    "tests/test_cluster_suite.py": 230,  # a 3-node Ray cluster in its own process
    "tests/test_lifecycle.py": 117,
    "tests/test_scheduler_lease.py": 109,
    "tests/test_runtime_authority.py": 91,
    "tests/test_run_end.py": 90,
    "tests/test_orgs_access.py": 90,
    "tests/test_mcp_live.py": 76,
    "tests/test_openapi_fuzz.py": 71,
    "tests/test_run_path_rules.py": 66,
    "tests/test_runtime_runs.py": 59,
    "tests/test_run_stream.py": 53,
    "tests/test_pipelines.py": 49,
    "tests/test_evals.py": 46,
    "tests/test_cli_commands.py": 44,
    "tests/test_phoenix_live.py": 42,
    "tests/test_storage_faults.py": 41,
}


def file_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


@pytest.hookimpl(trylast=True)  # after pytest-randomly's shuffle, which it keeps for the rest
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Heaviest files first; a stable sort, so tests within a file keep their order."""
    items.sort(key=lambda item: -HEAVY_FILES.get(file_of(item), 0))
