"""Shared ground of every capability: the store, errors, time, tokens, the vault, the cache, mail, ports."""

from svc.core import counters, errors, tokens
from svc.core.bulk import Batch
from svc.core.cache import TTLCache
from svc.core.clock import aware, iso, utcnow
from svc.core.embedded import EmbeddedMongo, NoDatabaseError, require_database
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
from svc.core.leases import Lease
from svc.core.mailer import Mailer, queued_mail
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
from svc.core.reaper import Reaper
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
from svc.core.slots import Slots
from svc.core.store import DATABASE_ERRORS, DRIVER_LOGGER, Document, Store
from svc.core.tally import add as tally_add
from svc.core.text import DisplayName, DisplayText
from svc.core.timeline import KINDS, Kind, Timeline, TimelineQuery, actor_of
from svc.core.timeline import add_to as add_timeline_entry
from svc.core.timeline import entry as timeline_entry
from svc.core.tokens import is_api_key
from svc.core.vault import Vault
from svc.core.windows import newest as newest_in_windows

__all__ = [
    "DATABASE_ERRORS",
    "DRIVER_LOGGER",
    "KINDS",
    "REKEY_BATCH",
    "Accepted",
    "AskAgain",
    "BadGateway",
    "BadRequest",
    "Batch",
    "Cancel",
    "Cancelled",
    "Conflict",
    "Continue",
    "Continued",
    "DisplayName",
    "DisplayText",
    "Document",
    "EmbeddedMongo",
    "Encrypted",
    "Forbidden",
    "Gone",
    "Governance",
    "InstallLookups",
    "Kind",
    "Lease",
    "Mailer",
    "NoDatabaseError",
    "NotFound",
    "OrgLookups",
    "PaymentLookups",
    "PaymentRequired",
    "RateLimited",
    "Reaper",
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
    "counters",
    "describe",
    "errors",
    "is_api_key",
    "iso",
    "newest_in_windows",
    "queued_mail",
    "rekey_summary",
    "require_database",
    "tally_add",
    "timeline_entry",
    "tokens",
    "utcnow",
]
