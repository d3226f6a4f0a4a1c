"""Run analytics for a template's owner: GET /api/runs.

The summary and the per-platform and per-agent breakdowns cover every run of the
template and are computed inside MongoDB (one `$match` + `$facet` of `$group`s) over
the run counters (svc/run_stats.py), so the cost does not grow with the runs. The run list is a
template's newest-runs record (svc/runs/newest.py), kept on the write path and bounded by
the largest `limit`.

Tool calls are the agents' outbound `http_request` calls: each entry written to the
security log (svc/security_log.py) also adds to its install's all-time tool-call
counter, so the figures cover all time like the run figures (the log itself keeps
30 days). A tool call failed when it got no HTTP response (blocked by a rule, the
default action, the judge or the egress guard, or a transport failure) or an HTTP
status of 400 or more.
"""

from __future__ import annotations

import asyncio
from datetime import date
from typing import Any

from pydantic import BaseModel, Field

from svc.core import BadRequest, Document, InstallLookups, NotFound, Store, iso, utcnow
from svc.identity import Principal, require_unscoped
from svc.runs import newest, run_stats
from svc.templates import owner_of, template_by_id_or_slug

DEFAULT_LIMIT = 100
MAX_LIMIT = newest.KEPT
RUN_FIELDS = ("installId", "platform", "agentKey", "status", "inputTokens", "outputTokens")

# ---- response shape (also the OpenAPI schema) -----------------------------------------


class RunsQuery(BaseModel):
    """Query of GET /api/runs."""

    templateId: str | None = Field(default=None, min_length=1, max_length=64)
    templateSlug: str | None = Field(default=None, min_length=1, max_length=64)
    limit: int = Field(default=DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="runs array only")


class RunsSummary(BaseModel):
    """Totals over every run of the template."""

    totalRuns: int
    failedRuns: int
    successRate: float | None = Field(description="0 to 100; null when there are no runs")
    totalInputTokens: int
    totalOutputTokens: int
    totalToolCalls: int = Field(description="agent http_request calls (security log, last 30 days)")
    failedToolCalls: int


class PlatformRuns(BaseModel):
    """Runs of the template on one platform."""

    platform: str
    totalRuns: int
    failedRuns: int
    inputTokens: int
    outputTokens: int
    hasTokens: bool = Field(description="whether any run on this platform reported tokens")


class AgentRuns(BaseModel):
    """Runs of one agent of the template."""

    agentKey: str | None
    runs: int
    failed: int
    inputTokens: int
    outputTokens: int


class RunItem(BaseModel):
    """One run, as the run list shows it."""

    id: str
    installId: str
    platform: str
    agentKey: str | None
    status: str
    inputTokens: int | None
    outputTokens: int | None
    errorMessage: str | None
    createdAt: str


class RunsReport(BaseModel):
    """GET /api/runs."""

    summary: RunsSummary
    byPlatform: list[PlatformRuns]
    byAgent: list[AgentRuns]
    runs: list[RunItem] = Field(description="newest first, at most `limit`")


# ---- pipelines -------------------------------------------------------------------------


def _total(field: str) -> Document:
    return {"$sum": f"${field}"}


def breakdown_pipeline(template_id: str) -> list[Document]:
    """Summary, by platform and by agent, from the template's all-time run counters.

    The counters (svc/run_stats.py, one per install, platform and agent) are grouped once
    by (platform, agent), which leaves a handful of rows; the `$facet` then rolls those
    rows up three ways. The cost grows with installs and agents, not with runs.
    """
    return [
        {"$match": {"kind": "total", "templateId": template_id}},
        {
            "$group": {
                "_id": {"platform": "$platform", "agentKey": "$agentKey"},
                "runs": _total("runs"),
                "failed": _total("failed"),
                "inputTokens": _total("inputTokens"),
                "outputTokens": _total("outputTokens"),
                "hasTokens": {"$max": {"$cond": [{"$gt": ["$tokenRuns", 0]}, 1, 0]}},
            }
        },
        {
            "$facet": {
                "summary": [
                    {
                        "$group": {
                            "_id": None,
                            "totalRuns": _total("runs"),
                            "failedRuns": _total("failed"),
                            "totalInputTokens": _total("inputTokens"),
                            "totalOutputTokens": _total("outputTokens"),
                        }
                    }
                ],
                "byPlatform": [
                    {
                        "$group": {
                            "_id": "$_id.platform",
                            "totalRuns": _total("runs"),
                            "failedRuns": _total("failed"),
                            "inputTokens": _total("inputTokens"),
                            "outputTokens": _total("outputTokens"),
                            "hasTokens": {"$max": "$hasTokens"},
                        }
                    },
                    {"$sort": {"totalRuns": -1, "_id": 1}},
                ],
                "byAgent": [
                    {
                        "$group": {
                            "_id": "$_id.agentKey",
                            "runs": _total("runs"),
                            "failed": _total("failed"),
                            "inputTokens": _total("inputTokens"),
                            "outputTokens": _total("outputTokens"),
                        }
                    },
                    {"$sort": {"runs": -1, "_id": 1}},
                ],
            }
        },
    ]


# ---- the service -----------------------------------------------------------------------


class RunAnalytics:
    """Answers GET /api/runs for the template's owner."""

    def __init__(self, store: Store, *, installs: InstallLookups) -> None:
        self.store = store
        self.installs = installs  # the template's installs (svc/wiring.py hands in their answer)

    async def report(self, principal: Principal, query: RunsQuery) -> dict[str, Any]:
        """Summary, byPlatform and byAgent over all runs; the newest `limit` runs."""
        template = await self._managed_template(principal, query.templateId, query.templateSlug)
        template_id = template["_id"]
        breakdown, tool_calls, runs = await asyncio.gather(
            self._breakdown(template_id),
            self._tool_calls(template_id),
            self._latest(template_id, query.limit),
        )
        return {**breakdown, "summary": {**breakdown["summary"], **tool_calls}, "runs": runs}

    async def install_usage(
        self, install_id: str, days: int
    ) -> tuple[list[tuple[date, Document]], dict[str, int]]:
        """An install's usage from its run counters, for whoever reaches it (`Installs.owned`): its
        day counters (runs, failed, completed, tokens) for the last `days` UTC days, oldest first,
        and its tokens per agent all time. Two bounded reads, whatever the number of runs."""
        return await asyncio.gather(
            run_stats.install_days(self.store, install_id, days, utcnow()),
            run_stats.install_agent_tokens(self.store, install_id),
        )

    async def _managed_template(
        self, principal: Principal, template_id: str | None, template_slug: str | None
    ) -> Document:
        """The template by id and/or slug if the caller owns it; 404 otherwise (no existence leak)."""
        if template_id is None and template_slug is None:
            raise BadRequest("templateId or templateSlug is required")
        require_unscoped(principal)
        template = await template_by_id_or_slug(
            self.store, template_id, template_slug, {"owner": 1, "kind": 1, "slug": 1}
        )
        if template is None or template.get("owner") != owner_of(principal):
            raise NotFound("Template not found")
        return template

    async def _breakdown(self, template_id: str) -> dict[str, Any]:
        cursor = await self.store[run_stats.COLLECTION].aggregate(breakdown_pipeline(template_id))
        (facets,) = await cursor.to_list(None)
        totals = next(iter(facets["summary"]), None) or {}
        total = int(totals.get("totalRuns", 0))
        failed = int(totals.get("failedRuns", 0))
        return {
            "summary": {
                "totalRuns": total,
                "failedRuns": failed,
                "successRate": round(100 * (total - failed) / total, 2) if total else None,
                "totalInputTokens": int(totals.get("totalInputTokens", 0)),
                "totalOutputTokens": int(totals.get("totalOutputTokens", 0)),
            },
            "byPlatform": [
                {
                    "platform": row["_id"],
                    "totalRuns": row["totalRuns"],
                    "failedRuns": row["failedRuns"],
                    "inputTokens": row["inputTokens"],
                    "outputTokens": row["outputTokens"],
                    "hasTokens": bool(row["hasTokens"]),
                }
                for row in facets["byPlatform"]
            ],
            "byAgent": [
                {
                    "agentKey": row["_id"],
                    "runs": row["runs"],
                    "failed": row["failed"],
                    "inputTokens": row["inputTokens"],
                    "outputTokens": row["outputTokens"],
                }
                for row in facets["byAgent"]
            ],
        }

    async def _tool_calls(self, template_id: str) -> dict[str, int]:
        install_ids = await self.installs.template_install_ids(template_id)
        if not install_ids:
            return {"totalToolCalls": 0, "failedToolCalls": 0}
        match = {"kind": "tools", "installId": {"$in": install_ids}}
        cursor = await self.store[run_stats.COLLECTION].aggregate(
            [
                {"$match": match},
                {"$group": {"_id": None, "total": _total("toolCalls"), "failed": _total("failedToolCalls")}},
            ]
        )
        row = next(iter(await cursor.to_list(None)), None) or {}
        return {"totalToolCalls": int(row.get("total", 0)), "failedToolCalls": int(row.get("failed", 0))}

    async def _latest(self, template_id: str, limit: int) -> list[dict[str, Any]]:
        """The newest runs, from the template's bounded newest-runs record kept on the write path
        (svc/runs/newest.py): one document read, whatever the number or age of the runs."""
        return [
            {
                "id": item["id"],
                **{name: item.get(name) for name in RUN_FIELDS},
                "errorMessage": item.get("errorMessage"),
                "createdAt": iso(item["createdAt"]),
            }
            for item in await newest.latest(self.store, template_id, limit)
        ]
