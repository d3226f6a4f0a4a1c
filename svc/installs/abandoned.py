"""Installs that never finished: upstream agents recorded as they are made, removed when the
install is abandoned (a failure after provisioning, a cancelled request, a crashed process), and
a deleted account's personal installs cancelled. A part of the `Installs` service
(svc/installs/installs.py), in a module of its own."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from config.settings import Settings
from plugins.manager import Plugins
from plugins.types import DeployedAgent, DeprovisionContext
from svc.core import Document, Store, utcnow

log = logging.getLogger(__name__)
# A provisioning still pending after this long was left by a crashed process (drivers time out
# well within it); its recorded upstream agents are removed by `sweep_abandoned`.
ABANDONED_AFTER = timedelta(minutes=30)


class AbandonedInstalls:
    """The clean-up half of `Installs` (a mixin: it uses the service's store, drivers and helpers)."""

    store: Store
    plugins: Plugins
    settings: Settings

    # Provided by `Installs` and `InstallRemoval`, which this completes.
    _decrypt_json: Callable[[str | None], dict[str, Any]]
    _forget: Callable[[str], Awaitable[None]]
    retire: Callable[[Document], Awaitable[bool]]

    async def _record_upstream(self, install_id: str, agent: DeployedAgent) -> None:
        """Persist an upstream agent the moment it exists (the sweeper's record after a crash)."""
        await self.store.installs.update_one({"_id": install_id}, {"$push": {"upstreamCreated": vars(agent)}})

    async def _abandon(self, doc: Document, agents: tuple[DeployedAgent, ...] | list[DeployedAgent]) -> None:
        """Delete an unfinished install's upstream agents (best effort), then the install."""
        if agents:
            context = DeprovisionContext(
                install_id=doc["_id"],
                platform=doc["platform"],
                credentials=self._decrypt_json(doc.get("credentialsEncrypted")),
                deployed_agents=tuple(agents),
                state={},
                options=doc.get("options") or {},
                allow_private=self.settings.egress_allow_private,
            )
            try:
                await self.plugins.deprovision(doc["platform"], context)
            except Exception as exc:  # the original failure is what the caller hears of
                log.warning("could not remove an abandoned install's agents: %s", type(exc).__name__)
        await self._forget(doc["_id"])

    async def sweep_abandoned(self, older_than: timedelta = ABANDONED_AFTER) -> int:
        """Installs a crashed process left mid-provisioning: their recorded upstream agents are
        deleted and the install removed; how many. Run periodically and at start-up."""
        cutoff = utcnow() - older_than
        stuck = self.store.installs.find(
            {"status": "pending", "deployedAgents": {"$exists": False}, "createdAt": {"$lt": cutoff}}
        )
        swept = 0
        async for doc in stuck:
            agents = [DeployedAgent(**a) for a in doc.get("upstreamCreated") or []]
            await self._abandon(doc, agents)
            swept += 1
        return swept

    async def retire_user_installs(self, user_id: str) -> int:
        """Cancel every personal install of a deleted account (tokens stop at once); how many.

        Upstream agents are left where they are, as `DELETE` without `removeUpstream` leaves them.
        """
        cursor = self.store.installs.find(
            {"owner.kind": "user", "owner.id": user_id, "status": {"$ne": "cancelled"}}, {"platform": 1}
        )
        retired = 0
        async for doc in cursor:
            await self.retire(doc)
            retired += 1
        return retired
