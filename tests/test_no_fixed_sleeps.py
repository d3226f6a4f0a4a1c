"""Tests wait for conditions, never for lengths of time (issue #23).

A `sleep(...)` in a test module is either a fixed wait (flaky on a loaded machine, slow on a
fast one) or a hand-written poll; both belong in tests/support/waiting.py, which polls a
condition with a deadline. Fake servers may sleep: that models a slow upstream. `sleep(0)`
only yields to the event loop and is allowed.

For the same reason (a failure that depends on timing), a test module parses Python through
tests/support/source.py, never `ast.parse` itself: on Python 3.11 a parse fails now and then when
the garbage collector or another thread builds an AST in the middle of it.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.source import parse

TESTS = Path(__file__).parent
ALLOWED = {
    TESTS / "support" / "waiting.py",  # the one place that polls
}


def sleeps(path: Path) -> list[int]:
    """Lines of `sleep(...)` / `x.sleep(...)` calls whose first argument is not the literal 0."""
    found = []
    for node in ast.walk(parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name != "sleep":
            continue
        first = node.args[0] if node.args else None
        if isinstance(first, ast.Constant) and first.value == 0:
            continue
        found.append(node.lineno)
    return found


def test_no_test_module_sleeps_to_synchronise() -> None:
    modules = [p for p in TESTS.rglob("*.py") if "fakes" not in p.relative_to(TESTS).parts]
    offenders = {
        f"{path.relative_to(TESTS)}:{line}"
        for path in modules
        if path not in ALLOWED
        for line in sleeps(path)
    }
    assert not offenders, f"wait on a condition (tests/support/waiting.py), not a sleep: {sorted(offenders)}"


def test_the_check_finds_a_sleep(tmp_path: Path) -> None:
    module = tmp_path / "test_x.py"
    module.write_text(
        "import asyncio\nasync def f():\n    await asyncio.sleep(0)\n    await asyncio.sleep(0.3)\n"
    )
    assert sleeps(module) == [4]


def test_test_modules_parse_python_through_the_support_helper() -> None:
    helper = TESTS / "support" / "source.py"
    offenders = sorted(
        str(path.relative_to(TESTS))
        for path in TESTS.rglob("*.py")
        if path not in (helper, Path(__file__)) and "ast.parse(" in path.read_text()
    )
    assert not offenders, f"parse with tests.support.source.parse, not ast.parse: {offenders}"
