"""Parsing Python source in tests that read the code (architecture, settings, docs checks).

CPython 3.11 keeps the AST constructor's recursion depth in one place for all threads: an
`ast.parse` fails with `SystemError: AST constructor recursion depth mismatch` when another
thread of the test process builds an AST at that moment (seen twice in whole runs; fixed in
Python 3.12). The parse is pure, so it is made again.
"""

from __future__ import annotations

import ast
from typing import Any

ATTEMPTS = 3


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> Any:
    """`ast.parse`, made again on 3.11's thread-shared depth error."""
    for attempt in range(ATTEMPTS):
        try:
            return ast.parse(source, filename=filename, mode=mode)
        except SystemError as exc:
            if "recursion depth mismatch" not in str(exc) or attempt == ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")
