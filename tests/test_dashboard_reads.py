"""The dashboard is a thin view (issue 35): nothing under api/ talks to MongoDB itself, and a page
shows what the JSON API's service call answers.

- no module under api/ imports pymongo or reads a collection (`store.<collection>`,
  `store[...]`, `.find(`, `.aggregate(`, `.count_documents(`, ...): pages, handlers and
  metrics call the owning `svc.<package>`'s functions, so one fix serves the page and the API;
- the run page of a long-paused run on a busy install shows every step of the run: its steps
  are read by the run's id (`RunDetail.get`), never by the install and a time span.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
API = ROOT / "api"
# What a collection answers to: reads and writes (a string's own `find` is spelled `in` or `index` here).
COLLECTION_CALLS = frozenset(
    {
        "find",
        "find_one",
        "aggregate",
        "count_documents",
        "estimated_document_count",
        "distinct",
        "watch",
        "insert_one",
        "insert_many",
        "update_one",
        "update_many",
        "replace_one",
        "delete_one",
        "delete_many",
        "find_one_and_update",
        "find_one_and_replace",
        "find_one_and_delete",
        "bulk_write",
    }
)
# What `Store` offers besides its collections (svc/core/store.py): the connection's lifecycle.
STORE_OPERATIONS = frozenset({"ensure_indexes", "ping", "close", "client", "uri", "connect"})


def named_store(node: ast.expr) -> bool:
    """`store`, `svc.store`, `services(request).store`, `self.store`: an expression naming the store."""
    if isinstance(node, ast.Name):
        return node.id == "store"
    return isinstance(node, ast.Attribute) and node.attr == "store"


def offences_in(source: str) -> list[str]:
    """Where a module talks to MongoDB itself: a pymongo import, a collection of the store, a
    collection operation (line numbers and what was found)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [
                f"{node.lineno}: import {a.name}" for a in node.names if a.name.split(".")[0] == "pymongo"
            ]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "pymongo":
            found.append(f"{node.lineno}: from {node.module} import")
        elif isinstance(node, ast.Subscript) and named_store(node.value):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif (
            isinstance(node, ast.Attribute) and named_store(node.value) and node.attr not in STORE_OPERATIONS
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in COLLECTION_CALLS
        ):
            found.append(f"{node.lineno}: .{node.func.attr}(")
    return found


def test_nothing_under_api_reads_the_database_itself() -> None:
    """Pages, handlers, metrics and the error table go through `svc` (docs/dashboard.md)."""
    offences = {
        str(path.relative_to(ROOT)): found
        for path in sorted(API.rglob("*.py"))
        if (found := offences_in(path.read_text()))
    }
    assert offences == {}


def test_the_finder_sees_every_spelling() -> None:
    """The check above would pass vacuously if the finder missed a spelling."""
    sample = (
        "from pymongo import DESCENDING\n"
        "import pymongo.errors\n"
        'docs = await svc.store["drafts"].find({}).to_list(None)\n'
        "docs = await services(request).store[ledger.RUNS].find_one({})\n"
        "docs = await svc.store.api_keys.find({}).to_list(None)\n"
        'queued = await store["outbox"].count_documents({})\n'
        "rows = await counters.aggregate([])\n"
        "await store.ensure_indexes()\n"
        "await store.close()\n"
        "ok = 'x' in text\n"
    )
    assert sorted(offences_in(sample)) == sorted(
        [
            "1: from pymongo import",
            "2: import pymongo.errors",
            "3: svc.store['drafts']",
            "3: .find(",
            "4: services(request).store[ledger.RUNS]",
            "4: .find_one(",
            "5: svc.store.api_keys",
            "5: .find(",
            "6: store['outbox']",
            "6: .count_documents(",
            "7: .aggregate(",
        ]
    )
