"""Run records: ingestion, the counters on the write path, analytics for builders, the run poller."""

from svc.runs.lookups import daily_by_install, find_record
from svc.runs.newest import backfill as backfill_newest_runs
from svc.runs.recording import managed as record_managed
from svc.runs.recording import metric_changes as run_metric_changes
from svc.runs.run_analytics import RunAnalytics, RunsQuery, RunsReport
from svc.runs.run_stats import last_runs, usage_by_install
from svc.runs.run_stats import rebuild as rebuild_run_stats
from svc.runs.runs import IngestBody, InvokeBody, Runs, SelfReportBody, record_of, require_ready

__all__ = [
    "IngestBody",
    "InvokeBody",
    "RunAnalytics",
    "Runs",
    "RunsQuery",
    "RunsReport",
    "SelfReportBody",
    "backfill_newest_runs",
    "daily_by_install",
    "find_record",
    "last_runs",
    "rebuild_run_stats",
    "record_managed",
    "record_of",
    "require_ready",
    "run_metric_changes",
    "usage_by_install",
]
