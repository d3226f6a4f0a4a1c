"""The run counters: written with every run, exact for any period, rebuildable."""

from __future__ import annotations

import asyncio
import itertools
import random
from datetime import UTC, datetime, timedelta

import svc.runs.newest as newest
import svc.runs.run_stats as run_stats
from svc.installs import InstallReads
from svc.runs.runs import Runs
from svc.runtime import RuntimeReads

BASE = datetime(2026, 10, 10, 0, 0, tzinfo=UTC)


def install(install_id: str) -> dict:
    return {
        "_id": install_id,
        "templateId": "tpl",
        "templateVersion": 1,
        "platform": "svc",
        "owner": {"kind": "user", "id": "u1"},
    }


async def seed(store, count: int = 300) -> list[dict]:
    """Runs through the real write path, spread over three days; the records written."""
    rng = random.Random(7)
    runs = Runs(store, installs=InstallReads(store), runtime=RuntimeReads(store))
    for i in range(count):
        await runs.record(
            install(f"i{i % 3}"),
            agent_key=rng.choice(["lead", "writer"]),
            status=rng.choice(["completed", "completed", "failed"]),
            source="test",
            input_tokens=rng.choice([None, rng.randint(0, 5000)]),
            output_tokens=rng.randint(0, 900),
            created_at=BASE + timedelta(seconds=rng.randint(0, 3 * 86400)),
        )
    return await store["runs"].find({}).to_list(None)


def expected(records: list[dict], start: datetime, end: datetime) -> dict[str, tuple[int, int, int, int]]:
    """The same figures computed naively from the records."""
    out: dict[str, list[int]] = {}
    for run in records:
        created = (
            run["createdAt"].replace(tzinfo=UTC) if run["createdAt"].tzinfo is None else run["createdAt"]
        )
        if not start <= created < end:
            continue
        tokens = (run["inputTokens"] or 0) + (run["outputTokens"] or 0)
        row = out.setdefault(run["installId"], [0, 0, 0, 0])
        row[0] += 1
        row[1] += run["status"] == "completed"
        row[2] += tokens
        row[3] += tokens if run["status"] == "completed" else 0
    return {key: tuple(value) for key, value in out.items()}  # type: ignore[misc]


async def test_usage_is_exact_for_any_period(store) -> None:
    records = await seed(store)
    rng = random.Random(11)
    periods = [
        (BASE, BASE + timedelta(days=3, seconds=1)),  # whole hours only
        (BASE + timedelta(minutes=17), BASE + timedelta(minutes=43)),  # inside one hour
        (BASE + timedelta(minutes=59, seconds=59), BASE + timedelta(hours=1, seconds=1)),
    ]
    for _ in range(20):
        start = BASE + timedelta(seconds=rng.randint(0, 3 * 86400))
        periods.append((start, start + timedelta(seconds=rng.randint(1, 2 * 86400))))
    for start, end in periods:
        usage = await run_stats.usage_by_install(store, {"templateId": "tpl"}, start, end)
        got = {u.install_id: (u.runs, u.completed, u.tokens, u.billed_tokens) for u in usage}
        assert got == expected(records, start, end), (start, end)


def test_segments_cover_the_period_once() -> None:
    start = datetime(2026, 10, 10, 22, 17, 5, tzinfo=UTC)
    end = datetime(2026, 10, 13, 1, 30, tzinfo=UTC)
    assert run_stats.segments(start, end) == [
        ("raw", start, datetime(2026, 10, 10, 23, tzinfo=UTC)),
        ("raw", datetime(2026, 10, 13, 1, tzinfo=UTC), end),
        ("hour", datetime(2026, 10, 10, 23, tzinfo=UTC), datetime(2026, 10, 11, tzinfo=UTC)),
        ("hour", datetime(2026, 10, 13, tzinfo=UTC), datetime(2026, 10, 13, 1, tzinfo=UTC)),
        ("day", datetime(2026, 10, 11, tzinfo=UTC), datetime(2026, 10, 13, tzinfo=UTC)),
    ]
    rng = random.Random(3)
    for _ in range(500):
        low = BASE + timedelta(seconds=rng.randint(0, 10 * 86400))
        high = low + timedelta(seconds=rng.randint(0, 5 * 86400))
        pieces = sorted(run_stats.segments(low, high), key=lambda piece: piece[1])
        assert all(a[2] == b[1] for a, b in itertools.pairwise(pieces)), "contiguous"
        if low < high:
            assert pieces[0][1] == low and pieces[-1][2] == high


async def test_buckets_hold_every_run_and_rebuild_gives_the_same(store) -> None:
    records = await seed(store, 120)
    buckets = await store[run_stats.COLLECTION].find({"kind": "hour"}).to_list(None)
    assert sum(b["runs"] for b in buckets) == len(records)
    assert sum(b["failed"] for b in buckets) == sum(r["status"] == "failed" for r in records)
    counters: dict = {}
    every = await store[run_stats.COLLECTION].find(counters).to_list(None)
    kept = await newest.latest(store, "tpl", 500)
    # Reported out of order, kept newest first ($push with $sort on the write path).
    in_order = sorted(records, key=lambda r: (r["createdAt"], r["_id"]), reverse=True)
    assert [item["id"] for item in kept] == [r["_id"] for r in in_order]
    before = {
        b["_id"]: {k: b[k] for k in ("runs", "failed", "completed", "inputTokens", "billedTokens")}
        for b in every
    }
    # Each install's newest record's time, kept by its all-time counters (GET /api/installs/mine).
    newest_of: dict[str, datetime] = {}
    for r in records:
        newest_of[r["installId"]] = max(newest_of.get(r["installId"], r["createdAt"]), r["createdAt"])
    last = await run_stats.last_runs(store, sorted(newest_of))
    assert {k: v.replace(microsecond=v.microsecond // 1000 * 1000) for k, v in newest_of.items()} == last
    await store[run_stats.COLLECTION].delete_many({})
    assert await run_stats.rebuild(store, {"templateId": "tpl"}) == len(before)
    after = await store[run_stats.COLLECTION].find(counters).to_list(None)
    assert await newest.latest(store, "tpl", 500) == kept
    assert {
        b["_id"]: {k: b[k] for k in ("runs", "failed", "completed", "inputTokens", "billedTokens")}
        for b in after
    } == before
    assert await run_stats.last_runs(store, sorted(newest_of)) == last, "rebuilt as written"


async def test_a_repeated_report_is_not_counted_twice(store) -> None:
    await store.ensure_indexes()  # the unique (installId, runId) index is what dedups
    runs = Runs(store, installs=InstallReads(store), runtime=RuntimeReads(store))
    for _ in range(3):
        await runs.record(install("i1"), agent_key="lead", status="completed", source="t", run_id="same")
    counters = await store[run_stats.COLLECTION].find({}).to_list(None)
    assert sorted(c["kind"] for c in counters) == ["day", "hour", "total"]
    assert all(c["runs"] == 1 for c in counters)
    (latest,) = await store[newest.COLLECTION].find({}).to_list(None)
    assert len(latest["runs"]) == 1


async def test_rebuild_keeps_the_tool_call_counters(store) -> None:
    await run_stats.count_tool_call(store, "i1", 200)
    await run_stats.count_tool_call(store, "i1", None)
    await seed(store, 10)
    await run_stats.rebuild(store)
    tools = await store[run_stats.COLLECTION].find_one({"kind": "tools"})
    assert (tools["toolCalls"], tools["failedToolCalls"]) == (2, 1)


async def test_the_newest_runs_record_keeps_only_the_newest(store, monkeypatch) -> None:
    monkeypatch.setattr(newest, "KEPT", 5)  # the bound, small enough to cross quickly
    runs = Runs(store, installs=InstallReads(store), runtime=RuntimeReads(store))
    for minute in (3, 9, 1, 7, 5, 8, 2, 6):  # reported out of order
        await runs.record(
            install("i1"),
            agent_key="lead",
            status="completed",
            source="t",
            created_at=BASE + timedelta(minutes=minute),
        )
    (doc,) = await store[newest.COLLECTION].find({}).to_list(None)
    assert len(doc["runs"]) == 5
    kept = [item["createdAt"] for item in await newest.latest(store, "tpl", 3)]
    assert kept == [BASE + timedelta(minutes=m) for m in (9, 8, 7)]


async def test_a_settlement_batch_counts_each_run_once_however_often_it_is_sent(store, db_uri) -> None:
    # A run's counters are one guarded upsert each (Batch.once). A resend meets the guard (a
    # duplicate key, read as "applied already"); runs settling at once from separate processes
    # race to create the same counters, and every one of them is still counted.
    from svc.core import Batch
    from svc.core.store import Store

    def record(run_id: str) -> dict:
        return {
            "_id": run_id,
            "runId": run_id,
            "templateId": "tpl",
            "installId": "i1",
            "platform": "svc",
            "agentKey": "lead",
            "owner": {"kind": "user", "id": "u1"},
            "status": "completed",
            "source": "run",
            "inputTokens": 10,
            "outputTokens": 5,
            "createdAt": BASE,
        }

    async def settle(writer: Store, run_id: str) -> None:
        batch = Batch(writer)
        run_stats.count_once(batch, record(run_id))
        batch.update("marks", {"_id": run_id}, {"$inc": {"sent": 1}}, upsert=True)  # after the counters
        await batch.commit()

    writers = [Store.connect(db_uri) for _ in range(4)]
    try:
        await asyncio.gather(*(settle(writers[i % 4], f"r{i}") for i in range(8)))
        for _ in range(2):  # sent again whole, as after a crash before `owed` was cleared
            await settle(store, "r0")
    finally:
        for writer in writers:
            await writer.close()
    totals = await store["run_stats"].find({"kind": {"$in": ["total", "day", "hour"]}}).to_list(None)
    assert sorted(doc["kind"] for doc in totals) == ["day", "hour", "total"]
    assert all(doc["runs"] == 8 and doc["inputTokens"] == 80 for doc in totals), totals
    latest = await store["runs_newest"].find_one({"templateId": "tpl"})
    assert len(latest["runs"]) == 8
    assert (await store["marks"].find_one({"_id": "r0"}))["sent"] == 3  # the rest of the batch went on


def test_held_counter_changes_are_written_as_one_update_per_label_set() -> None:
    from svc.core.metric_counters import LAG_BUCKETS, merged, observation
    from svc.core.metric_counters import increment as counter

    changes = [
        counter("runs", {"status": "completed"}),
        counter("runs", {"status": "failed"}),
        counter("runs", {"status": "completed"}, 2),
        observation("lag", {}, [0.2], LAG_BUCKETS),
        observation("lag", {}, [0.2, 7.0], LAG_BUCKETS),
    ]
    out = {(name, tuple(labels.items())): update for name, labels, update in merged(filter(None, changes))}
    assert out[("runs", (("status", "completed"),))] == {"$inc": {"value": 3}}
    assert out[("runs", (("status", "failed"),))] == {"$inc": {"value": 1}}
    lag = out[("lag", ())]
    assert lag["$inc"] == {"buckets.0": 2, "buckets.4": 1, "count": 3, "sum": 0.2 + 0.2 + 7.0}
    assert lag["$set"] == {"bounds": list(LAG_BUCKETS)}
