"""The managed runtime: starting and executing runs, the agent loop, pipelines and gates, schedules,
access policies, the security log and pipeline events."""

from svc.runtime import ledger
from svc.runtime.agent_loop import RunScope, TeamRunner, root_agent
from svc.runtime.events import Events, agent_runs
from svc.runtime.execution import CANCELLED, Admission, InstallRunner, failed_outcome
from svc.runtime.llm import LLM, ProviderNotConfigured
from svc.runtime.outreach import BulkBody, ContinueBody, DraftEdit, Outreach, RejectBody
from svc.runtime.pipelines import MAX_DRAFT_ID
from svc.runtime.policy import read_back
from svc.runtime.runs_exec import HeartbeatBody, RunBody, RunService, RuntimeTestBody, WebhookBody
from svc.runtime.schedules import (
    ScheduleBody,
    SchedulerCore,
    Schedules,
    ToggleBody,
    check_cron,
    check_timezone,
    next_fire,
)
from svc.runtime.security_log import SecurityLog

__all__ = [
    "CANCELLED",
    "LLM",
    "MAX_DRAFT_ID",
    "Admission",
    "BulkBody",
    "ContinueBody",
    "DraftEdit",
    "Events",
    "HeartbeatBody",
    "InstallRunner",
    "Outreach",
    "ProviderNotConfigured",
    "RejectBody",
    "RunBody",
    "RunScope",
    "RunService",
    "RuntimeTestBody",
    "ScheduleBody",
    "SchedulerCore",
    "Schedules",
    "SecurityLog",
    "TeamRunner",
    "ToggleBody",
    "WebhookBody",
    "agent_runs",
    "check_cron",
    "check_timezone",
    "failed_outcome",
    "ledger",
    "next_fire",
    "read_back",
    "root_agent",
]
