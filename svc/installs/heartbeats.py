"""An orchestrator's heartbeat for one of its agents (orchA `http` agents): which install it is
for, the context its platform driver reads the task from, and the write-back when the run ends.
The runtime runs the heartbeat's run; what it needs of the install is asked here, never read
from the installs service's internals (tests/test_architecture.py)."""

from __future__ import annotations

import hmac
import json
from typing import Any

from plugins.manager import Plugins
from plugins.types import HeartbeatContext, HeartbeatTask
from svc.core import Document, Store, Unauthorized, Vault
from svc.installs.lookups import installs_of_agent

# Upstream agent ids come from each deployer's own server, so they may repeat across installs.
MAX_CANDIDATES = 20


class Heartbeats:
    """The installs' side of a heartbeat."""

    def __init__(self, store: Store, vault: Vault, plugins: Plugins, allow_private: bool) -> None:
        self.store = store
        self.vault = vault
        self.plugins = plugins
        self.allow_private = allow_private

    async def install(self, agent_id: str, secret: str | None) -> Document:
        """The ready install with this upstream agent whose webhook secret the caller presents;
        401 `Invalid runtime credential` otherwise."""
        platforms = [p.id for p in self.plugins.platforms() if p.traits.heartbeats]
        found = None
        for candidate in await installs_of_agent(self.store, agent_id, platforms, MAX_CANDIDATES):
            expected = self.vault.decrypt(candidate["webhookSecretEncrypted"])
            if secret and hmac.compare_digest(secret.encode(), expected.encode()):
                found = candidate
        if found is None:
            raise Unauthorized("Invalid runtime credential")
        return found

    def context(
        self, install: Document, agent_key: str, agent_id: str, payload: dict[str, Any]
    ) -> HeartbeatContext:
        """What the platform's driver is handed for this heartbeat (the install's credentials and
        platform state decrypted)."""
        return HeartbeatContext(
            install_id=install["_id"],
            platform=install["platform"],
            agent_key=agent_key,
            platform_agent_id=agent_id,
            credentials=self._decrypt(install.get("credentialsEncrypted")),
            state=self._decrypt(install.get("platformStateEncrypted")),
            payload=payload,
            allow_private=self.allow_private,
        )

    async def task(self, beat: HeartbeatContext) -> HeartbeatTask | None:
        """The task the platform's driver reads for the heartbeat (None: none found)."""
        return await self.plugins.heartbeat_task(beat.platform, beat)

    async def finished(self, beat: HeartbeatContext) -> list[str]:
        """The driver's write-back of the run's outcome; the problems it met."""
        return await self.plugins.heartbeat_finished(beat.platform, beat)

    def _decrypt(self, token: str | None) -> dict[str, Any]:
        return json.loads(self.vault.decrypt(token)) if token else {}
