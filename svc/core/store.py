"""The MongoDB store: one client, the collections, and every index, in one place.

Services receive a `Store` and use its collections directly; the index table
below is the single list of what the service queries by, created at start-up.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pymongo import ASCENDING, DESCENDING, AsyncMongoClient, IndexModel
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import ConnectionFailure, ExecutionTimeout, OperationFailure, PyMongoError, WTimeoutError

log = logging.getLogger(__name__)

Document = dict[str, Any]
DEFAULT_DATABASE = "svc"
PING_TIMEOUT_S = 3.0
# Every operation's bound (SVC_DB_TIMEOUT_SECONDS): a database that does not answer fails the
# operation within it (a 503 "Database unavailable" at the API) instead of hanging.
DEFAULT_TIMEOUT_S = 10.0
# A database that cannot be reached or does not answer within the operation's bound: the
# client-side timeout raises a ConnectionFailure (server selection, the socket), the server
# side an ExecutionTimeout (maxTimeMS) or a WTimeoutError. The API answers each with one 503
# (api/errors.py), without importing the driver.
DATABASE_ERRORS: tuple[type[Exception], ...] = (ConnectionFailure, ExecutionTimeout, WTimeoutError)
# The driver's logger: its command log at DEBUG carries whole documents (api/logs.py keeps it quiet).
DRIVER_LOGGER = "pymongo"


@dataclass(frozen=True)
class Index:
    """One index: its keys and options (unique, TTL, partial filter)."""

    keys: list[tuple[str, int]]
    unique: bool = False
    ttl_seconds: int | None = None
    partial: Document | None = None
    name: str | None = None
    options: Document = field(default_factory=dict)

    def model(self) -> IndexModel:
        """The index as one entry of a `createIndexes` command."""
        return IndexModel(self.keys, **self.kwargs())

    def kwargs(self) -> Document:
        """Keyword arguments for `create_index`."""
        kwargs: Document = dict(self.options)
        if self.unique:
            kwargs["unique"] = True
        if self.ttl_seconds is not None:
            kwargs["expireAfterSeconds"] = self.ttl_seconds
        if self.partial is not None:
            kwargs["partialFilterExpression"] = self.partial
        if self.name is not None:
            kwargs["name"] = self.name
        return kwargs


STRING = {"$type": "string"}


def projection(fields: Iterable[str]) -> Document | None:
    """A find's projection of only `fields`; None (the whole document) when none are named."""
    wanted = {name: 1 for name in fields}
    return wanted or None


def owner_filter(owner: Document) -> Document:
    """The filter of the records `owner` holds, field by field as the `owner.kind, owner.id`
    indexes are: a whole-document `owner` match uses no index, and the embedded store then
    reads every record of the collection."""
    return {"owner.kind": owner["kind"], "owner.id": owner["id"]}

INDEXES: dict[str, list[Index]] = {
    "users": [
        Index([("email", ASCENDING)], unique=True),
        Index([("handle", ASCENDING)], unique=True, partial={"handle": STRING}),
        # The provider's account.updated events name the payout account.
        Index([("payout.accountId", ASCENDING)], partial={"payout.accountId": STRING}),
    ],
    # Sessions are kept a week past expiry so that a stale cookie reads "Session expired".
    "sessions": [
        Index([("purgeAt", ASCENDING)], ttl_seconds=0),
        Index([("userId", ASCENDING)]),
    ],
    "api_keys": [
        Index([("keyHash", ASCENDING)], unique=True),
        Index([("userId", ASCENDING), ("createdAt", DESCENDING)]),
        Index([("orgId", ASCENDING), ("createdAt", DESCENDING)]),
    ],
    "install_tokens": [Index([("installId", ASCENDING)])],
    "rate_limits": [Index([("expiresAt", ASCENDING)], ttl_seconds=0)],
    # Slugs are unique among templates; a version draft shares its parent's slug, and a
    # parent has at most one version draft.
    "templates": [
        Index([("slug", ASCENDING)], unique=True, partial={"kind": "template"}, name="slug_unique"),
        Index(
            [("parentTemplateId", ASCENDING)],
            unique=True,
            partial={"kind": "version_draft"},
            name="one_version_draft",
        ),
        Index([("kind", ASCENDING), ("status", ASCENDING), ("publishedAt", DESCENDING), ("_id", DESCENDING)]),
        # The published list, one query per scope (svc/templates/reading.py): the public ones,
        # and a builder's own (whose two leading fields also serve every by-owner read).
        Index(
            [
                ("kind", ASCENDING),
                ("status", ASCENDING),
                ("visibility", ASCENDING),
                ("publishedAt", DESCENDING),
                ("_id", DESCENDING),
            ]
        ),
        Index(
            [
                ("owner.kind", ASCENDING),
                ("owner.id", ASCENDING),
                ("kind", ASCENDING),
                ("status", ASCENDING),
                ("publishedAt", DESCENDING),
                ("_id", DESCENDING),
            ]
        ),
    ],
    "template_versions": [
        Index([("templateId", ASCENDING), ("version", DESCENDING)], unique=True),
        Index([("publishedAt", ASCENDING), ("_id", ASCENDING)]),  # automatic upgrades: releases in order
    ],
    "installs": [
        Index([("webhookTokenHash", ASCENDING)], unique=True, partial={"webhookTokenHash": STRING}),
        Index([("templateId", ASCENDING), ("status", ASCENDING)]),
        Index([("deployedAgents.externalId", ASCENDING)]),
        Index([("platform", ASCENDING), ("status", ASCENDING)]),  # the run poller's active orchB installs
        Index([("owner.kind", ASCENDING), ("owner.id", ASCENDING), ("createdAt", DESCENDING)]),
        # /installs/mine and cancel billing find a user's installs by who deployed them.
        Index([("deployedBy", ASCENDING), ("createdAt", DESCENDING)]),
    ],
    # Every index here is paid on each of a run's writes (its insert, claim, end and settlement;
    # an index holding `status` twice per transition), so each earns its place.
    "pipeline_runs": [
        Index([("installId", ASCENDING), ("status", ASCENDING)]),
        # A queued run's position (the run detail): the queued runs created before it; also the
        # scheduler's queued scheduled runs (status, then source among the few queued).
        Index([("status", ASCENDING), ("createdAt", ASCENDING)]),
        # The runs that still owe side effects (the sweeper every 2 s, an actor's recovery): a
        # multikey index, so those reads match only the few owing runs, not every run ever made.
        Index([("owed", ASCENDING)]),
        # The dashboard's install page lists an install's newest runs.
        Index([("installId", ASCENDING), ("createdAt", DESCENDING)]),
        # A run report names a platform run the runtime may hold (svc/runtime/lookups.py).
        Index([("installId", ASCENDING), ("platformRunId", ASCENDING)]),
    ],
    "schedules": [
        Index([("enabled", ASCENDING), ("nextRunAt", ASCENDING)]),
        # A claim finds the schedules it claimed by its token; every tick looks for fires a cut
        # tick left claimed (svc/runtime/schedule_fires.py): few or none.
        Index([("firing.token", ASCENDING)]),
        Index([("firing.since", ASCENDING)]),
    ],
    "pipeline_events": [Index([("installId", ASCENDING), ("createdAt", DESCENDING)])],
    "agent_runs": [
        Index([("installId", ASCENDING), ("createdAt", DESCENDING)]),
        # The run detail reads a run's steps (docs/runs.md).
        Index([("runId", ASCENDING), ("startedAt", ASCENDING)]),
    ],
    "security_requests": [
        Index([("installId", ASCENDING), ("createdAt", DESCENDING)]),
        Index([("runId", ASCENDING), ("createdAt", ASCENDING)]),
        Index([("createdAt", ASCENDING)], ttl_seconds=30 * 24 * 3600, name="security_requests_ttl"),
    ],
    "outbox": [Index([("createdAt", DESCENDING)])],
    # An outreach pipeline's drafts and targets are read by install and status: a gated step's
    # input (the reviewers' notes), the review queues and their counts (the dashboard's live page
    # each second). Without an index each read was every install's drafts: 118 ms at 5,000
    # against 1-6 ms.
    "drafts": [Index([("installId", ASCENDING), ("status", ASCENDING)])],
    "targets": [Index([("installId", ASCENDING), ("status", ASCENDING)])],
    # MCP (docs/mcp.md): the deployer's pinned tools, and approvals bound to one call each
    # (one open request or approval per call digest; kept 30 days).
    "mcp_consents": [Index([("installId", ASCENDING)])],
    # Evals (docs/evals.md): a template's history and the scorecard of one exact definition.
    "eval_scorecards": [
        Index([("templateId", ASCENDING), ("digest", ASCENDING), ("createdAt", DESCENDING)]),
        Index([("templateId", ASCENDING), ("version", ASCENDING), ("createdAt", DESCENDING)]),
        Index([("templateId", ASCENDING), ("createdAt", DESCENDING)]),
    ],
    "mcp_approvals": [
        Index([("openDigest", ASCENDING)], unique=True, partial={"openDigest": STRING}),
        Index([("installId", ASCENDING), ("requestedAt", DESCENDING)]),
        Index([("requestedAt", ASCENDING)], ttl_seconds=30 * 24 * 3600, name="mcp_approvals_ttl"),
    ],
    # Durable webhook callbacks (svc/runtime/callbacks.py): the job runner reads the due ones.
    "callbacks": [Index([("status", ASCENDING), ("nextAttemptAt", ASCENDING)])],
    # One spend-cap mail per install, period and threshold; kept past the period, then dropped.
    "spend_alerts": [Index([("at", ASCENDING)], ttl_seconds=62 * 24 * 3600)],
    "runs": [
        Index([("installId", ASCENDING), ("runId", ASCENDING)], unique=True),
        # GET /api/runs: the newest runs of a template (and billing's period scans by template).
        Index([("templateId", ASCENDING), ("createdAt", DESCENDING)]),
        Index([("installId", ASCENDING), ("createdAt", ASCENDING)]),
        Index([("owner.kind", ASCENDING), ("owner.id", ASCENDING), ("createdAt", DESCENDING)]),
    ],
    # Run counters (svc/run_stats.py): what analytics and billing read instead of every run.
    "run_stats": [
        Index([("kind", ASCENDING), ("templateId", ASCENDING), ("start", ASCENDING)]),
        Index([("kind", ASCENDING), ("installId", ASCENDING), ("start", ASCENDING)]),
        # Org analytics: an org's day and hour counters (without it, every counter is read).
        Index([("kind", ASCENDING), ("owner.kind", ASCENDING), ("owner.id", ASCENDING), ("start", 1)]),
    ],
    # One invoice per install and period: the guard against charging a period twice.
    "invoices": [
        Index(
            [("installId", ASCENDING), ("periodStart", ASCENDING), ("periodEnd", ASCENDING)],
            unique=True,
            name="one_invoice_per_period",
        ),
        Index([("installId", ASCENDING), ("status", ASCENDING), ("periodEnd", DESCENDING)]),
        Index([("builderUserId", ASCENDING), ("status", ASCENDING)]),
    ],
    "payment_events": [Index([("receivedAt", ASCENDING)], ttl_seconds=90 * 24 * 3600)],
    "vault_secrets": [
        Index(
            [
                ("owner.kind", ASCENDING),
                ("owner.id", ASCENDING),
                ("companyId", ASCENDING),
                ("key", ASCENDING),
            ],
            unique=True,
        ),
    ],
    "org_members": [
        Index([("userId", ASCENDING), ("joinedAt", ASCENDING)]),
        Index([("orgId", ASCENDING), ("userId", ASCENDING)], unique=True),
        Index([("orgId", ASCENDING), ("role", ASCENDING)]),
        Index([("orgId", ASCENDING), ("joinedAt", ASCENDING)]),
    ],
    "orgs": [
        Index([("slug", ASCENDING)], unique=True),
        # Looked up by the payment webhook.
        Index([("payCustomerId", ASCENDING)], partial={"payCustomerId": STRING}),
        Index([("paySubscriptionId", ASCENDING)], partial={"paySubscriptionId": STRING}),
    ],
    # One pending invitation per email and org (a new one replaces the token); kept 30 days
    # past expiry so that a late accept reads "expired".
    "org_invitations": [
        Index([("orgId", ASCENDING), ("email", ASCENDING)], unique=True),
        Index([("tokenHash", ASCENDING)], unique=True),
        Index([("orgId", ASCENDING), ("expiresAt", ASCENDING)]),
        Index([("purgeAt", ASCENDING)], ttl_seconds=0),
    ],
    "org_secrets": [Index([("orgId", ASCENDING), ("key", ASCENDING)], unique=True)],
    "org_approvals": [
        Index([("orgId", ASCENDING), ("status", ASCENDING), ("createdAt", DESCENDING)]),
        Index([("orgId", ASCENDING), ("createdAt", DESCENDING)]),
    ],
    # Append-only; never expires (kept after the org is deleted).
    "org_audit": [Index([("orgId", ASCENDING), ("createdAt", DESCENDING), ("_id", DESCENDING)])],
    # The audit timeline (svc/core/audit_timeline.py): append-only, read newest first per install or org.
    "timeline": [
        Index([("installId", ASCENDING), ("createdAt", DESCENDING), ("_id", DESCENDING)]),
        Index([("orgId", ASCENDING), ("createdAt", DESCENDING), ("_id", DESCENDING)]),
    ],
}
# Where the store records that every index of INDEXES exists: the document `indexes` holds the
# table's digest. A start whose table has that digest skips its createIndexes (one read instead of
# a round trip per collection: 31 on every API start and every command-line call). Deleting the
# document makes the next start create every index again (docs/storage.md).
SCHEMA = "schema"
INDEXES_MARKER = "indexes"
# Indexes an earlier release created and this one no longer has: each costs every write to its
# collection, so a start that applies a new table drops them (by their keys; gone already is fine).
GONE_ALREADY = (26, 27)  # NamespaceNotFound (no such collection), IndexNotFound
RETIRED_INDEXES: dict[str, list[list[tuple[str, int]]]] = {
    # Served by (status, createdAt): the queued runs are few.
    "pipeline_runs": [[("status", ASCENDING), ("source", ASCENDING)]],
    # Replaced by the (owner.kind, owner.id, kind, status, publishedAt, _id) index (its prefix).
    "templates": [[("owner.kind", ASCENDING), ("owner.id", ASCENDING)]],
}


@functools.cache
def indexes_digest() -> str:
    """A digest of INDEXES: it changes whenever an index is added, removed or changed."""
    table = {name: [index.model().document for index in indexes] for name, indexes in INDEXES.items()}
    return hashlib.sha256(json.dumps(table, sort_keys=True, default=str).encode()).hexdigest()


class Store:
    """The database handle shared by every service."""

    def __init__(
        self, client: AsyncMongoClient[Document], uri: str, database: str = DEFAULT_DATABASE
    ) -> None:
        self.client = client
        self.uri = uri
        self.db: AsyncDatabase[Document] = client[database]

    @classmethod
    def connect(cls, uri: str, timeout_s: float = DEFAULT_TIMEOUT_S, appname: str = "svc") -> Store:
        """A store for the URI; its database is the URI's path, or `svc`.

        `timeout_s` bounds every operation, from choosing a server to the last byte of the
        answer (PyMongo's client-side operation timeout, `timeoutMS`, which also sends the
        remaining time to the server as `maxTimeMS`): a frozen or unreachable database raises
        a timeout error (`PyMongoError.timeout`) within it, never hangs a request or a run.
        `appname` names the process kind in the server's view of its connections (`svc-actor` for
        install actors), which operators see in `currentOp` and tests aim fault injection at.
        """
        timeout_ms = max(1, round(timeout_s * 1000))
        client: AsyncMongoClient[Document] = AsyncMongoClient(
            uri,
            tz_aware=True,
            timeoutMS=timeout_ms,
            serverSelectionTimeoutMS=timeout_ms,
            connectTimeoutMS=timeout_ms,
            appname=appname,
        )
        database = client.get_default_database(default=DEFAULT_DATABASE).name
        return cls(client, uri, database)

    def __getitem__(self, name: str) -> AsyncCollection[Document]:
        return self.db[name]

    @property
    def users(self) -> AsyncCollection[Document]:
        """Accounts (email unique, handle unique when set)."""
        return self.db["users"]

    @property
    def sessions(self) -> AsyncCollection[Document]:
        """Login sessions, `_id` the hash of the cookie value."""
        return self.db["sessions"]

    @property
    def api_keys(self) -> AsyncCollection[Document]:
        """Personal and org API keys, looked up by `keyHash`."""
        return self.db["api_keys"]

    @property
    def install_tokens(self) -> AsyncCollection[Document]:
        """Install tokens (`_id` the hash of the token) for run ingest."""
        return self.db["install_tokens"]

    @property
    def installs(self) -> AsyncCollection[Document]:
        """Installs of templates onto platforms."""
        return self.db["installs"]

    @property
    def org_members(self) -> AsyncCollection[Document]:
        """Organisation memberships."""
        return self.db["org_members"]

    @property
    def orgs(self) -> AsyncCollection[Document]:
        """Organisations."""
        return self.db["orgs"]

    @property
    def rate_limits(self) -> AsyncCollection[Document]:
        """Fixed-window request counters shared by every API process."""
        return self.db["rate_limits"]

    async def ensure_indexes(self) -> None:
        """Create every index in INDEXES unless the database records this table's digest
        (idempotent): one `createIndexes` per collection, so a start that creates them costs a
        round trip per collection rather than one per index, and one that need not costs a read."""
        digest = indexes_digest()
        marker = await self.db[SCHEMA].find_one({"_id": INDEXES_MARKER}, {"digest": 1})
        if marker is not None and marker.get("digest") == digest:
            return
        for collection, indexes in INDEXES.items():
            await self.db[collection].create_indexes([index.model() for index in indexes])
        for collection, retired in RETIRED_INDEXES.items():
            for keys in retired:
                try:
                    await self.db[collection].drop_index(keys)
                except OperationFailure as exc:
                    if exc.code not in GONE_ALREADY:
                        raise
        await self.db[SCHEMA].update_one(
            {"_id": INDEXES_MARKER}, {"$set": {"digest": digest}}, upsert=True
        )

    async def ping(self) -> bool:
        """True when the database answers."""
        try:
            await asyncio.wait_for(self.client.admin.command("ping"), PING_TIMEOUT_S)
        except (PyMongoError, TimeoutError) as exc:
            log.warning("database ping failed: %s", type(exc).__name__)
            return False
        return True

    async def close(self) -> None:
        """Close every connection."""
        await self.client.close()
