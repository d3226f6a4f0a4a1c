"""Evals (issue 36): a template's eval suite run on the real runtime, scorecards, the publish gate
and the builders' monthly eval budget (docs/evals.md)."""

from svc.evals.budget import used_this_month
from svc.evals.scorecards import summary
from svc.evals.service import Evals, HistoryQuery
from svc.evals.suites import EvalLimits, SuiteRunner

__all__ = ["EvalLimits", "Evals", "HistoryQuery", "SuiteRunner", "summary", "used_this_month"]
