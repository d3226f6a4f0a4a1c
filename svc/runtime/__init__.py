"""The managed runtime: starting and executing runs, the run's journal and its settlement, the agent
loop, pipelines and gates, schedules, access policies, the security log and pipeline events."""

from svc.runtime.agent_loop import RunScope, TeamRunner, root_agent
from svc.runtime.callbacks import CallbackDelivery
from svc.runtime.cron import check_cron, check_timezone, next_fire
from svc.runtime.eval_runs import eval_run_of, is_eval_install, new_eval_run, recorded_journal
from svc.runtime.faults import CrashPoints
from svc.runtime.handover import HandOver
from svc.runtime.host import InstallHost
from svc.runtime.incarnations import holder as incarnation_holder
from svc.runtime.incarnations import leave as leave_install
from svc.runtime.install_runner import (
    DATABASE_DOWN,
    INTERRUPTED,
    RUNTIME_FAILURES,
    STALLED,
    Admission,
    InstallRunner,
    RunLimits,
)
from svc.runtime.journal import scratch
from svc.runtime.ledger import NOT_STARTED, new_run
from svc.runtime.ledger import get as runtime_run
from svc.runtime.ledger import note_handoff as note_run_handoff
from svc.runtime.llm import LLM, ProviderNotConfigured
from svc.runtime.lookups import RuntimeReads, is_runtime_run, next_runs
from svc.runtime.mcp_installs import McpApprovalDecisionBody, McpApprovalQuery, McpConsentBody, McpInstalls
from svc.runtime.mcp_policy import read_back_mcp
from svc.runtime.mcp_run import McpRun, McpService
from svc.runtime.mcp_support import ApprovalNeeded, ToolOutcome
from svc.runtime.mcp_tools import McpToolbox
from svc.runtime.neglected_runs import orphaned as orphaned_runs
from svc.runtime.neglected_runs import owing as owing_runs
from svc.runtime.neglected_runs import stalled as stalled_runs
from svc.runtime.neglected_runs import waiting as waiting_runs
from svc.runtime.outreach_review import BulkBody, ContinueBody, DraftEdit, Outreach, RejectBody, draft_number
from svc.runtime.pipeline_events import Events, agent_runs
from svc.runtime.pipelines import MAX_DRAFT_ID
from svc.runtime.policy import read_back
from svc.runtime.pool import claim as claim_spare
from svc.runtime.pool import counts as spare_counts
from svc.runtime.pool import entry as spare_entry
from svc.runtime.pool import forget as forget_spare
from svc.runtime.pool import names as spare_names
from svc.runtime.pool import register as register_spare
from svc.runtime.pool import release as release_spare
from svc.runtime.pool import spares as waiting_spares
from svc.runtime.run_detail import RunDetail
from svc.runtime.run_lists import queued_runs
from svc.runtime.run_requests import HeartbeatBody, RunBody, RunService, RuntimeTestBody, WebhookBody
from svc.runtime.run_watch import CLOSING, RunWatch, Subscription, settled_event
from svc.runtime.run_watch_events import TERMINAL, RunEvents, redacted
from svc.runtime.schedule_fires import SchedulerCore
from svc.runtime.schedules import ScheduleBody, Schedules, ToggleBody
from svc.runtime.security_log import ENTRY_FIELDS as SECURITY_FIELDS
from svc.runtime.security_log import RUN_ENTRY_FIELDS as RUN_SECURITY_FIELDS
from svc.runtime.security_log import McpCallRecord, SecurityLog
from svc.runtime.settlement import OWED, Settlement

__all__ = [
    "CLOSING",
    "DATABASE_DOWN",
    "INTERRUPTED",
    "LLM",
    "MAX_DRAFT_ID",
    "NOT_STARTED",
    "OWED",
    "RUNTIME_FAILURES",
    "RUN_SECURITY_FIELDS",
    "SECURITY_FIELDS",
    "STALLED",
    "TERMINAL",
    "Admission",
    "ApprovalNeeded",
    "BulkBody",
    "CallbackDelivery",
    "ContinueBody",
    "CrashPoints",
    "DraftEdit",
    "Events",
    "HandOver",
    "HeartbeatBody",
    "InstallHost",
    "InstallRunner",
    "McpApprovalDecisionBody",
    "McpApprovalQuery",
    "McpCallRecord",
    "McpConsentBody",
    "McpInstalls",
    "McpRun",
    "McpService",
    "McpToolbox",
    "Outreach",
    "ProviderNotConfigured",
    "RejectBody",
    "RunBody",
    "RunDetail",
    "RunEvents",
    "RunLimits",
    "RunScope",
    "RunService",
    "RunWatch",
    "RuntimeReads",
    "RuntimeTestBody",
    "ScheduleBody",
    "SchedulerCore",
    "Schedules",
    "SecurityLog",
    "Settlement",
    "Subscription",
    "TeamRunner",
    "ToggleBody",
    "ToolOutcome",
    "WebhookBody",
    "agent_runs",
    "check_cron",
    "check_timezone",
    "claim_spare",
    "draft_number",
    "eval_run_of",
    "forget_spare",
    "incarnation_holder",
    "is_eval_install",
    "is_runtime_run",
    "leave_install",
    "new_eval_run",
    "new_run",
    "next_fire",
    "next_runs",
    "note_run_handoff",
    "orphaned_runs",
    "owing_runs",
    "queued_runs",
    "read_back",
    "read_back_mcp",
    "recorded_journal",
    "redacted",
    "register_spare",
    "release_spare",
    "root_agent",
    "runtime_run",
    "scratch",
    "settled_event",
    "spare_counts",
    "spare_entry",
    "spare_names",
    "stalled_runs",
    "waiting_runs",
    "waiting_spares",
]
