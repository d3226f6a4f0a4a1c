"""Run records: ingestion, the counters on the write path, analytics for builders, the run poller."""

from svc.runs import newest, recording, run_stats
from svc.runs.lookups import daily_by_install, find_record
from svc.runs.run_analytics import RunAnalytics, RunsQuery, RunsReport
from svc.runs.run_stats import usage_by_install
from svc.runs.runs import IngestBody, InvokeBody, Runs, SelfReportBody, record_of, require_ready

__all__ = [
    "IngestBody",
    "InvokeBody",
    "RunAnalytics",
    "Runs",
    "RunsQuery",
    "RunsReport",
    "SelfReportBody",
    "daily_by_install",
    "find_record",
    "newest",
    "record_of",
    "recording",
    "require_ready",
    "run_stats",
    "usage_by_install",
]
