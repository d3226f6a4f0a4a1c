"""Where the embedded database's time goes: its profiler, grouped by command shape.

Used by bench/load.py --db-profile: the database records every command it runs
(`profile` level 2, which itself costs a write per command, so figures taken with
it on are not the bench's), and this groups them by collection, operation and the
shape of the filter (values replaced by their types), with the count and the time
spent, and says for each find-like shape whether its filter rides an index or reads
the whole collection (the embedded server uses an index only when the index covers
every field of the filter).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from svc.core import Store

META = {"lsid", "$db", "$clusterTime", "txnNumber", "$readPreference", "cursor", "batchSize"}


def shape(value: Any) -> Any:
    """A filter with its values replaced by type names (operators and field names kept)."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [shape(v) for v in value[:1]]
    return type(value).__name__


def filter_of(op: str, command: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """(what, filter) of a profiled command."""
    if "find" in command:
        return "find", command.get("filter") or {}
    if "aggregate" in command:
        first = (command.get("pipeline") or [{}])[0]
        return "aggregate", first.get("$match") if isinstance(first, dict) else None
    if "count" in command:
        return "count", command.get("query") or {}
    if "update" in command:
        updates = command.get("updates") or [{}]
        return f"update x{len(updates)}", (updates[0] or {}).get("q")
    if "findAndModify" in command or "findandmodify" in command:
        return "findAndModify", command.get("query")
    if "delete" in command:
        return "delete", ((command.get("deletes") or [{}])[0] or {}).get("q")
    if "insert" in command:
        return f"insert x{len(command.get('documents') or [])}", None
    return op, None


async def start(store: Store) -> None:
    """Record every command from now on."""
    await store.db.command({"profile": 0})
    await store.db.drop_collection("system.profile")
    await store.db.command({"profile": 2, "slowms": 0})


async def report(store: Store, top: int = 15) -> list[str]:
    """Stop recording; the busiest command shapes, with their plans."""
    await store.db.command({"profile": 0})
    groups: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    filters: dict[tuple[str, str, str], dict[str, Any] | None] = {}
    async for entry in store.db["system.profile"].find({}):
        command = {k: v for k, v in (entry.get("command") or {}).items() if k not in META}
        what, flt = filter_of(str(entry.get("op")), command)
        key = (str(entry.get("ns", "")).split(".", 1)[-1], what, repr(shape(flt)) if flt is not None else "")
        groups[key].append(float(entry.get("millis") or 0))
        filters.setdefault(key, flt)
    total = sum(sum(v) for v in groups.values()) or 1.0
    lines = [f"{'ms':>8} {'%':>5} {'count':>7}  collection / op / filter shape / plan"]
    for key, millis in sorted(groups.items(), key=lambda kv: -sum(kv[1]))[:top]:
        collection, what, flt_shape = key
        plan = ""
        flt = filters[key]
        if flt is not None:
            try:
                explained = await store.db[collection].find(flt or {}).explain()
                winning = repr(explained["queryPlanner"]["winningPlan"])
                plan = "COLLSCAN" if "COLLSCAN" in winning else "index"
            except Exception as exc:  # a diagnostic: say why, go on
                plan = f"? {type(exc).__name__}"
        lines.append(
            f"{sum(millis):>8.0f} {100 * sum(millis) / total:>5.1f} {len(millis):>7}  "
            f"{collection} {what} {flt_shape[:90]} {plan}"
        )
    return lines
