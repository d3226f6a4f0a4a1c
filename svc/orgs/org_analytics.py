"""Org analytics: runs of the org's installs per day and per template, by MongoDB aggregations
over the run counters (svc/runs/run_stats.py), so the cost grows with days, not with runs.

The window is `from` (default 30 days before `to`) to `to` (default now). A free
org sees at most 30 days, a Pro org 365: a wider window is clamped (its start
moves forward) and the response's `fromDate` shows the window actually used.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from svc.core import BadRequest, Document, Store, Timestamp, iso, utcnow
from svc.installs import find_installs
from svc.runs import daily_by_install

FREE_DAYS = 30
PRO_DAYS = 365
DEFAULT_DAYS = 30


class AnalyticsQuery(BaseModel):
    """Query of GET /api/orgs/:slug/analytics."""

    model_config = ConfigDict(populate_by_name=True)

    from_: Timestamp | None = Field(default=None, alias="from", description="ISO 8601; default 30 days ago")
    to: Timestamp | None = Field(default=None, description="ISO 8601; default now")


def window(query: AnalyticsQuery, max_days: int, now: datetime | None = None) -> tuple[datetime, datetime]:
    """The window to report: defaults filled in, clamped to `max_days`; 400 when from is after to."""
    end = query.to if query.to is not None else (now or utcnow())  # Timestamp: already UTC
    start = query.from_ if query.from_ is not None else end - timedelta(days=DEFAULT_DAYS)
    if start > end:
        raise BadRequest("from: must not be after to")
    return max(start, end - timedelta(days=max_days)), end


class OrgAnalytics:
    """Computes the analytics response from the run counters (and the edge hours' records)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def report(self, org: Document, query: AnalyticsQuery) -> dict[str, Any]:
        """{fromDate, toDate, isPro, maxDays, totalRuns, successRate, byDay, byTemplate}."""
        is_pro = org.get("plan") == "pro"
        max_days = PRO_DAYS if is_pro else FREE_DAYS
        start, end = window(query, max_days)
        # Whole days and hours come from the run counters, the edge hours from the records; a
        # window ending now reads its current hour from the hour counters, not the runs.
        owner = {"owner.kind": "org", "owner.id": org["_id"]}
        groups = await daily_by_install(self.store, owner, start, end, open_end=query.to is None)
        by_day: dict[str, dict[str, Any]] = {
            day: {"date": day, "total": 0, "success": 0} for day in days(start, end)
        }
        install_ids = sorted({g["_id"]["installId"] for g in groups})
        installs = await find_installs(self.store, install_ids, "templateName", "definition.gates")
        by_template: dict[str, dict[str, Any]] = {}
        for group in groups:
            key, total, success = group["_id"], group["total"], group["success"]
            day = by_day.setdefault(key["day"], {"date": key["day"], "total": 0, "success": 0})
            day["total"] += total
            day["success"] += success
            install = installs.get(key["installId"]) or {}
            name = install.get("templateName") or key["templateId"]
            if (install.get("definition") or {}).get("gates"):
                template_id = f"pipeline:{key['installId']}:{name}"
            else:
                template_id = key["templateId"]
            entry = by_template.setdefault(
                template_id, {"templateId": template_id, "name": name, "total": 0, "success": 0}
            )
            entry["total"] += total
            entry["success"] += success
        total_runs = sum(d["total"] for d in by_day.values())
        successes = sum(d["success"] for d in by_day.values())
        return {
            "fromDate": iso(start),
            "toDate": iso(end),
            "isPro": is_pro,
            "maxDays": max_days,
            "totalRuns": total_runs,
            "successRate": round(100 * successes / total_runs, 2) if total_runs else None,
            "byDay": [by_day[d] for d in sorted(by_day)],
            "byTemplate": sorted(by_template.values(), key=lambda e: (-e["total"], e["templateId"])),
        }


def days(start: datetime, end: datetime) -> list[str]:
    """Every UTC date from start to end inclusive, as YYYY-MM-DD."""
    first, last = start.astimezone(UTC).date(), end.astimezone(UTC).date()
    return [(first + timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]
