"""The dashboard is a thin view (issue 35): nothing under api/ talks to MongoDB itself, and a page
shows what the JSON API's service call answers.

- no module under api/ imports pymongo or reads a collection (`store.<collection>`,
  `store[...]`, `.find(`, `.aggregate(`, `.count_documents(`, ...): pages, handlers and
  metrics call the owning `svc.<package>`'s functions, so one fix serves the page and the API;
- the run page of a long-paused run on a busy install shows every step of the run: its steps
  are read by the run's id (`RunDetail.get`), never by the install and a time span;
- the live install page costs one read per install and refresh, shared by its tabs, in a slot
  of the heavy-request gate.
"""

from __future__ import annotations

import ast
import asyncio
import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from api.heavy import BUSY, HEAVY_GATE, HEAVY_SLOTS, Busy
from api.pages.install_live import LiveSnapshots, Snapshot
from svc.core import utcnow
from tests.support.runtime import managed_client, member, svc_install
from tests.support.source import parse
from tests.support.waiting import eventually, wait_status

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
    for node in ast.walk(parse(source)):
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


STEP_ROW = re.compile(r'<tr data-agent="([^"]+)">')
BUSY_INSTALL_STEPS = 1_200  # more than the 1,000 rows the old time-span read stopped at
PAUSE = timedelta(days=3)


async def test_a_long_paused_run_on_a_busy_install_shows_every_step(make_client, aiohttp_server, store):
    """A run paused three days at its first gate, while 1,200 steps of other runs of the same
    install were recorded: its page shows its three steps, as GET .../runs/:runId does."""
    client, llm = await managed_client(make_client, aiohttp_server)
    gates = [{"name": "review", "after": "a"}]
    caller, key, install_id = await svc_install(client, [member("a"), member("b"), member("c")], gates=gates)
    llm.script(text="A out")
    started = await client.post(f"/api/installs/{install_id}/run", json={"task": "go"}, headers=key)
    paused = await started.json()
    assert paused["status"] == "paused", paused
    run_id = paused["runId"]
    # The pause lasted three days: the run and its first step began then.
    run = await store["pipeline_runs"].find_one({"_id": run_id})
    then = utcnow() - PAUSE
    journal = [
        {**e, "startedAt": then, "endedAt": then + timedelta(seconds=1)} if e.get("kind") == "agent" else e
        for e in run["journal"]
    ]
    await store["pipeline_runs"].update_one(
        {"_id": run_id}, {"$set": {"createdAt": then, "startedAt": then, "journal": journal}}
    )
    # Meanwhile the install was busy: other runs' steps, all within this run's span.
    step = PAUSE / (BUSY_INSTALL_STEPS + 1)
    await store["agent_runs"].insert_many(
        {
            "_id": f"other-{n}:a",
            "installId": install_id,
            "runId": f"other-{n}",
            "agentKey": "a",
            "path": "a",
            "model": "providerA:small",
            "iterations": 1,
            "status": "completed",
            "inputTokens": 1,
            "outputTokens": 1,
            "errorMessage": None,
            "durationMs": 1,
            "startedAt": then + step * (n + 1),
            "createdAt": then + step * (n + 1),
        }
        for n in range(BUSY_INSTALL_STEPS)
    )
    try:
        llm.script(text="B out")
        llm.script(text="C out")
        resumed = await client.post(
            f"/api/installs/{install_id}/continue", json={"bypassGates": True}, headers=key
        )
        assert resumed.status == 200, await resumed.text()
        await wait_status(store, run_id, "completed")

        detail = await (await client.get(f"/api/installs/{install_id}/runs/{run_id}", headers=key)).json()
        assert [s["agent"] for s in detail["steps"]] == ["a", "b", "c"]
        html = await (await client.get(f"/installs/{install_id}/runs/{run_id}", headers=caller.cookie)).text()
        assert STEP_ROW.findall(html) == ["a", "b", "c"]
    finally:
        # The embedded server drops a database slowly when it holds many documents (the store
        # fixture's teardown would time out); one delete of the seeded steps is quick.
        await store["agent_runs"].delete_many({"installId": install_id})


async def test_tabs_share_one_snapshot_per_install_and_refresh():
    """Tabs asking at once share one read; within the snapshot's second they read nothing; a page
    load reads afresh (what the person just did shows); a failed read is not kept."""
    snapshots = LiveSnapshots(ttl_s=60.0)
    reads: list[str] = []
    release = asyncio.Event()

    async def read() -> Snapshot:
        reads.append("read")
        number = len(reads)
        await release.wait()
        return Snapshot([{"id": str(number)}], {})

    tabs = [asyncio.ensure_future(snapshots.get("i1", read)) for _ in range(5)]
    await asyncio.sleep(0)
    release.set()
    shared = await asyncio.gather(*tabs)
    assert reads == ["read"] and all(s is shared[0] for s in shared)
    assert await snapshots.get("i1", read) is shared[0] and reads == ["read"]
    fresh = await snapshots.get("i1", read, fresh=True)
    assert reads == ["read", "read"] and fresh.runs == [{"id": "2"}]
    assert await snapshots.get("i1", read) is fresh  # the fresh read serves the tabs next
    # A page load while a tab's read is in flight reads again; the older read is not kept.
    release.clear()
    older = asyncio.ensure_future(snapshots.get("i3", read))
    await asyncio.sleep(0)
    newer = asyncio.ensure_future(snapshots.get("i3", read, fresh=True))
    await asyncio.sleep(0)
    release.set()
    assert (await older).runs == [{"id": "3"}] and (await newer).runs == [{"id": "4"}]
    assert await snapshots.get("i3", read) is await newer and len(reads) == 4

    async def failing() -> Snapshot:
        raise RuntimeError("database down")

    with pytest.raises(RuntimeError):
        await snapshots.get("i2", failing)
    assert await snapshots.get("i2", read) is not None and len(reads) == 5


async def test_the_install_page_and_its_live_data_go_through_the_heavy_gate(make_client, aiohttp_server):
    """With every heavy slot taken, the install page answers 503 with Retry-After (like the API's
    heavy routes) and the live stream skips its refreshes (each refused by the gate) instead of
    reading; once a slot frees, the stream sends the runs and the page answers."""
    client, _ = await managed_client(make_client, aiohttp_server)
    caller, _, install_id = await svc_install(client, [member("a")])
    gate = client.server.app[HEAVY_GATE]
    refused: list[str] = []
    read = gate.read

    async def counted(call: Any) -> Any:
        try:
            return await read(call)
        except Busy as exc:
            refused.append(exc.message)
            raise

    gate.read = counted  # type: ignore[method-assign]
    gate.wait_s = 0.05
    for _ in range(HEAVY_SLOTS):
        await gate.slots.acquire()
    try:
        busy = await client.get(f"/installs/{install_id}", headers=caller.cookie)
        assert busy.status == 503 and busy.headers["Retry-After"] == "1"
        assert BUSY in await busy.text()
        stream = await client.get(f"/installs/{install_id}/live", headers=caller.cookie)
        assert stream.status == 200
        await eventually(lambda: len(refused) >= 3, "the live stream's refreshes refused by the gate")
    finally:
        for _ in range(HEAVY_SLOTS):
            gate.slots.release()
    while True:
        line = (await asyncio.wait_for(stream.content.readline(), 30)).decode()
        if line.startswith("data: "):
            break
    assert "No runs yet" in json.loads(line[6:])["runs"]
    stream.close()
    assert (await client.get(f"/installs/{install_id}", headers=caller.cookie)).status == 200
