"""Parsing Python source in tests that read the code (architecture, settings, docs checks).

CPython 3.11 keeps the AST constructor's recursion depth in one place for the whole process:
`ast.parse` fails with `SystemError: AST constructor recursion depth mismatch` when another AST
is built while its own is being built (fixed in Python 3.12). Two ways were seen in whole runs:
another thread parsing at that moment, and the garbage collector running a finalizer in the
middle of the parse (an asyncio subprocess transport collected after its loop closed), whose
unraisable-exception report formats a traceback, and 3.11's traceback calls `ast.parse` to place
its carets. So the collector is off during a parse, and a parse that still meets the error is made
again: it is pure.
"""

from __future__ import annotations

import ast
import gc
from typing import Any

ATTEMPTS = 3


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> Any:
    """`ast.parse` with no collection inside it, made again on 3.11's shared depth error."""
    for attempt in range(ATTEMPTS):
        collecting = gc.isenabled()
        gc.disable()
        try:
            return ast.parse(source, filename=filename, mode=mode)
        except SystemError as exc:
            if "recursion depth mismatch" not in str(exc) or attempt == ATTEMPTS - 1:
                raise
        finally:
            if collecting:
                gc.enable()
    raise AssertionError("unreachable")
