"""The run poller: counts runs on platforms that do not push them (orchB).

`poll_once` asks each active install's driver (`svc_poll_runs`, through the plugin
facade) for runs finished since the install's cursor, records each one (source
`poll`, runId = the upstream conversation id, so a run seen twice is stored once),
and moves the cursor (`pollCursor`, the newest upstream update time seen) forward
with `$max`, so two pollers racing never move it back. One install failing (bad
credentials, upstream down) is logged without secrets and does not stop the others.

Who calls `poll_once` every `SVC_RUN_POLL_SECONDS` is the periodic-job runner's
concern; this class only does one round.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import datetime
from typing import Any

from config.settings import Settings
from plugins.manager import Plugins
from plugins.types import DeployedAgent, PlatformError, PollContext, RunReport
from svc.core import Document, Store, Vault, aware, iso, utcnow
from svc.runs import Runs

log = logging.getLogger(__name__)

# Installs polled at the same time: bounds the upstream connections one round opens.
CONCURRENCY = 8


def _parse(value: str | None) -> datetime | None:
    """An ISO 8601 time from a report as an aware datetime; None when absent or unparseable."""
    if not value:
        return None
    try:
        return aware(datetime.fromisoformat(value.replace("Z", "+00:00")))
    except ValueError:
        return None


class RunPoller:
    """One polling round over every active install of a polled platform."""

    def __init__(self, store: Store, vault: Vault, plugins: Plugins, runs: Runs, settings: Settings) -> None:
        self.store = store
        self.vault = vault
        self.plugins = plugins
        self.runs = runs
        self.settings = settings

    async def poll_once(self, now: datetime | None = None) -> int:
        """Poll every active install once; the number of new runs recorded."""
        now = now or utcnow()
        # Platforms without push reporting (their `polled` trait; spec: orchB's runs are counted
        # by polling its conversation list).
        polled = [p.id for p in self.plugins.platforms() if p.traits.polled]
        installs = self.store.installs.find(
            {"platform": {"$in": polled}, "status": "completed"},
            {"definition": 0, "secretsEncrypted": 0},
        )
        limit = asyncio.Semaphore(CONCURRENCY)

        async def guarded(install: Document) -> int:
            async with limit:
                return await self._poll_install(install, now)

        counts = await asyncio.gather(*[guarded(install) async for install in installs])
        return sum(counts)

    async def _poll_install(self, install: Document, now: datetime) -> int:
        """Poll one install; 0 (and a log line) when it fails."""
        install_id = install["_id"]
        try:
            return await self._poll(install, now)
        except PlatformError as exc:  # the driver's detail is free of credentials
            log.warning(
                "run poll failed",
                extra={
                    "installId": install_id,
                    "platform": install["platform"],
                    "error": exc.detail,
                    "upstreamStatus": exc.upstream_status,
                },
            )
        except Exception as exc:  # a bug or an egress refusal: the message may hold a URL or secret
            log.warning(
                "run poll failed",
                extra={"installId": install_id, "platform": install["platform"], "error": type(exc).__name__},
            )
        return 0

    async def _poll(self, install: Document, now: datetime) -> int:
        # The install created its agents upstream, so a first poll (no cursor) finds its runs only.
        cursor = install.get("pollCursor")
        context = PollContext(
            install_id=install["_id"],
            platform=install["platform"],
            credentials=self._credentials(install),
            deployed_agents=tuple(DeployedAgent(**agent) for agent in install.get("deployedAgents") or []),
            since=iso(cursor) if cursor is not None else None,
            allow_private=self.settings.egress_allow_private,
        )
        reports = await self.plugins.poll_runs(install["platform"], context)
        keys = {agent["externalId"]: agent["key"] for agent in install.get("deployedAgents") or []}
        recorded = 0
        newest: datetime | None = None
        for report in reports:
            updated = _parse(report.updatedAt)
            if updated is not None and (newest is None or updated > newest):
                newest = updated
            if await self._record(install, report, keys, now):
                recorded += 1
        change: dict[str, Any] = {"$set": {"lastPolledAt": now}}
        if newest is not None:
            change["$max"] = {"pollCursor": newest}
        await self.store.installs.update_one({"_id": install["_id"]}, change)
        if recorded:
            log.info("runs polled", extra={"installId": install["_id"], "recorded": recorded})
        return recorded

    async def _record(
        self,
        install: Document,
        report: RunReport,
        keys: dict[str, str],
        now: datetime,
    ) -> bool:
        """Store one report; True when it is a run not seen before."""
        _, new = await self.runs.add(
            install,
            agent_key=keys.get(report.platformAgentId),
            status=report.status,
            source="poll",
            input_tokens=report.inputTokens,
            output_tokens=report.outputTokens,
            error_message=report.errorMessage,
            run_id=report.runId,
            platform_agent_id=report.platformAgentId,
            # Dated when recorded, not when it finished upstream: a run found after a billing
            # cycle closed must fall into the next period, not into one already charged.
            created_at=now,
        )
        return new

    def _credentials(self, install: Document) -> dict[str, str]:
        token = install.get("credentialsEncrypted")
        return json.loads(self.vault.decrypt(token)) if token else {}
