"""Shared ground of every capability: the store, errors, time, tokens, the vault, the cache, mail, ports.

The processes the service starts beside itself (the embedded database, the reaper of a local Ray)
are controlled from `svc.subprocesses`, not from here."""

from svc.core.audit_timeline import KINDS, Kind, Timeline, TimelineQuery, actor_of
from svc.core.audit_timeline import add_to as add_timeline_entry
from svc.core.audit_timeline import entry as timeline_entry
from svc.core.bulk import DUPLICATE_KEY, Batch
from svc.core.cache import TTLCache
from svc.core.capped_counts import Slots
from svc.core.clock import aware, iso, utcnow
from svc.core.errors import (
    BadGateway,
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    NotFound,
    PaymentRequired,
    RateLimited,
    ServiceError,
    Unauthorized,
    Unavailable,
    Unprocessable,
)
from svc.core.exact_increment import add as increment_exactly
from svc.core.leases import Lease
from svc.core.mailer import Mailer, queued_mail
from svc.core.metric_counters import DURATION_BUCKETS, LAG_BUCKETS
from svc.core.metric_counters import Buffered as BufferedMetrics
from svc.core.metric_counters import Change as MetricChange
from svc.core.metric_counters import inc as count_metric
from svc.core.metric_counters import increment as counter_increment
from svc.core.metric_counters import observation as histogram_observation
from svc.core.metric_counters import observe as observe_metric
from svc.core.metric_counters import read_all as read_metrics
from svc.core.metric_counters import write as write_metrics
from svc.core.models import RequestBody, Timestamp, describe
from svc.core.ports import (
    Governance,
    InstallLookups,
    OrgLookups,
    PaymentLookups,
    Runtime,
    RuntimeFailure,
    RuntimeLookups,
)
from svc.core.rekey import BATCH as REKEY_BATCH
from svc.core.rekey import Encrypted, Rekeying
from svc.core.rekey import Progress as RekeyProgress
from svc.core.rekey import summary as rekey_summary
from svc.core.run_commands import (
    Accepted,
    AskAgain,
    Cancel,
    Cancelled,
    Continue,
    Continued,
    RunOutcome,
    StartRun,
    Watched,
    WatchEvents,
)
from svc.core.store import DATABASE_ERRORS, DRIVER_LOGGER, Document, Store, owner_filter, projection
from svc.core.text import DisplayName, DisplayText
from svc.core.tokens import (
    derived_id,
    is_api_key,
    is_install_token,
    new_api_key,
    new_id,
    new_install_token,
    new_session_token,
    new_webhook_token,
)
from svc.core.tokens import digest as credential_digest
from svc.core.vault import Vault
from svc.core.windows import floor_of as window_floor
from svc.core.windows import newest as newest_in_windows

__all__ = [
    "DATABASE_ERRORS",
    "DRIVER_LOGGER",
    "DUPLICATE_KEY",
    "DURATION_BUCKETS",
    "KINDS",
    "LAG_BUCKETS",
    "REKEY_BATCH",
    "Accepted",
    "AskAgain",
    "BadGateway",
    "BadRequest",
    "Batch",
    "BufferedMetrics",
    "Cancel",
    "Cancelled",
    "Conflict",
    "Continue",
    "Continued",
    "DisplayName",
    "DisplayText",
    "Document",
    "Encrypted",
    "Forbidden",
    "Gone",
    "Governance",
    "InstallLookups",
    "Kind",
    "Lease",
    "Mailer",
    "MetricChange",
    "NotFound",
    "OrgLookups",
    "PaymentLookups",
    "PaymentRequired",
    "RateLimited",
    "RekeyProgress",
    "Rekeying",
    "RequestBody",
    "RunOutcome",
    "Runtime",
    "RuntimeFailure",
    "RuntimeLookups",
    "ServiceError",
    "Slots",
    "StartRun",
    "Store",
    "TTLCache",
    "Timeline",
    "TimelineQuery",
    "Timestamp",
    "Unauthorized",
    "Unavailable",
    "Unprocessable",
    "Vault",
    "WatchEvents",
    "Watched",
    "actor_of",
    "add_timeline_entry",
    "aware",
    "count_metric",
    "counter_increment",
    "credential_digest",
    "derived_id",
    "describe",
    "histogram_observation",
    "increment_exactly",
    "is_api_key",
    "is_install_token",
    "iso",
    "new_api_key",
    "new_id",
    "new_install_token",
    "new_session_token",
    "new_webhook_token",
    "newest_in_windows",
    "observe_metric",
    "owner_filter",
    "projection",
    "queued_mail",
    "read_metrics",
    "rekey_summary",
    "timeline_entry",
    "utcnow",
    "window_floor",
    "write_metrics",
]
