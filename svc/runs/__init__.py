"""Run records: ingestion, the counters on the write path, analytics for builders, the run poller."""

from svc.runs import newest, run_stats
from svc.runs.lookups import daily_by_install, find_record
from svc.runs.recording import managed as record_managed
from svc.runs.recording import metric_changes as run_metric_changes
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
    "record_managed",
    "record_of",
    "require_ready",
    "run_metric_changes",
    "run_stats",
    "usage_by_install",
]
