"""Removing installs: cancel (with or without removing the agents upstream), the deployer's
cancel claim, retiring, and handing an org's installs back when the org is deleted. A part of
the `Installs` service (svc/installs/installs.py), in a module of its own."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from config.settings import Settings
from plugins.manager import Plugins
from plugins.types import (
    DeployedAgent,
    DeprovisionContext,
    PlatformError,
    PlatformTraits,
)
from svc.core import (
    BadGateway,
    Conflict,
    Document,
    Kind,
    Store,
    utcnow,
)
from svc.identity import Credentials, Principal
from svc.templates import release_install

log = logging.getLogger(__name__)


class InstallRemoval:
    """The removal half of `Installs` (a mixin: it uses the service's store, drivers and reach)."""

    store: Store
    plugins: Plugins
    settings: Settings
    credentials: Credentials

    # Provided by `Installs`, which this completes.
    owned: Callable[[Principal, str], Awaitable[Document]]
    traits: Callable[[str], PlatformTraits]
    _audit: Callable[[Principal, str, Kind, str, dict[str, Any]], Awaitable[None]]
    _decrypt_json: Callable[[str | None], dict[str, Any]]

    async def delete(self, principal: Principal, install_id: str, remove_upstream: bool) -> dict[str, Any]:
        """Cancel the install; remove the agents upstream first when the platform always does
        (`deprovision_on_delete`) or when asked."""
        doc = await self.owned(principal, install_id)
        if doc["status"] == "cancelled":
            # A plain DELETE leaves the agents upstream (spec); asking to remove them afterwards
            # is honoured once, so a cancelled install never strands agents that keep waking.
            if not (remove_upstream and self._upstream_left(doc)):
                raise Conflict("Install is already cancelled")
            claimed = await self.store.installs.find_one_and_update(
                {"_id": install_id, "status": "cancelled", "upstreamRemovedAt": {"$exists": False}},
                {"$set": {"upstreamRemovedAt": utcnow()}},
            )
            if claimed is None:
                raise Conflict("Install is already cancelled")
            try:
                deleted, warnings = await self._remove_upstream(doc, remove_upstream)
            except BaseException:
                undo = {"$unset": {"upstreamRemovedAt": ""}}
                await self.store.installs.update_one({"_id": install_id}, undo)
                raise
            meta = {"removeUpstream": True, "deletedAgents": deleted}
            await self._audit(principal, install_id, "install", "install.upstream_removed", meta)
            return self._deleted(doc, deleted, warnings)
        deleted, warnings = await self._remove_upstream(doc, remove_upstream)
        if remove_upstream and self._upstream_left(doc):
            done = {"$set": {"upstreamRemovedAt": utcnow()}}
            await self.store.installs.update_one({"_id": install_id}, done)
        if not await self.retire(doc):
            raise Conflict("Install is already cancelled")  # a concurrent cancellation won
        meta = {"removeUpstream": remove_upstream, "deletedAgents": deleted}
        await self._audit(principal, install_id, "install", "install.cancelled", meta)
        return self._deleted(doc, deleted, warnings)

    def _upstream_left(self, doc: Document) -> bool:
        """Whether the install's agents may still exist upstream and can be removed by us."""
        traits = self.traits(doc["platform"])
        return (
            not traits.managed
            and not traits.deprovision_on_delete
            and "upstreamRemovedAt" not in doc
            and bool(doc.get("credentialsEncrypted"))
        )

    def _deleted(self, doc: Document, deleted: int, warnings: tuple[str, ...]) -> dict[str, Any]:
        """The answer of DELETE /api/installs/:id."""
        install_id = doc["_id"]
        response: dict[str, Any] = {
            "ok": True,
            "installId": install_id,
            "platform": doc["platform"],
            "deletedAgents": deleted,
        }
        if warnings:
            response["warnings"] = list(warnings)
        return response

    async def _remove_upstream(self, doc: Document, remove_upstream: bool) -> tuple[int, tuple[str, ...]]:
        """Delete the agents upstream when the platform always does or when asked; (deleted, warnings)."""
        install_id = doc["_id"]
        deleted, warnings = 0, tuple[str, ...]()
        traits = self.traits(doc["platform"])
        if traits.deprovision_on_delete or (remove_upstream and not traits.managed):
            context = DeprovisionContext(
                install_id=install_id,
                platform=doc["platform"],
                credentials=self._decrypt_json(doc.get("credentialsEncrypted")),
                deployed_agents=tuple(DeployedAgent(**a) for a in doc.get("deployedAgents") or []),
                state=self._decrypt_json(doc.get("platformStateEncrypted")),
                options=doc.get("options") or {},
                allow_private=self.settings.egress_allow_private,
            )
            try:
                result = await self.plugins.deprovision(doc["platform"], context)
            except PlatformError as exc:
                raise BadGateway(exc.detail, upstreamStatus=exc.upstream_status) from None
            deleted, warnings = result.deleted_agents, tuple(result.warnings)
        return deleted, warnings

    async def claim_cancellation(self, install: Document, now: datetime, lease: timedelta) -> bool:
        """Claim the install's cancellation (one conditional write), so a double click bills and
        mails once; a claim older than `lease` is taken over."""
        claimed = await self.store.installs.find_one_and_update(
            {
                "_id": install["_id"],
                "status": install["status"],
                "$or": [{"cancellingAt": {"$exists": False}}, {"cancellingAt": {"$lt": now - lease}}],
            },
            {"$set": {"cancellingAt": now}},
        )
        return claimed is not None

    async def hand_back(self, org_id: str, members: set[str], owner: Document) -> None:
        """An org being deleted gives its installs back: to the member who deployed each one (their
        card may pay for it) while still a member, else to `owner`."""
        as_org = {"owner.kind": "org", "owner.id": org_id}
        deployers = await self.store.installs.distinct(
            "deployedBy", {**as_org, "deployedBy": {"$type": "string"}}
        )
        for deployer in [d for d in deployers if d in members]:  # former members get nothing
            await self.store.installs.update_many(
                {**as_org, "deployedBy": deployer},
                {"$set": {"owner": {"kind": "user", "id": deployer}, "updatedAt": utcnow()}},
            )
        await self.store.installs.update_many(as_org, {"$set": {"owner": owner, "updatedAt": utcnow()}})

    async def retire(self, doc: Document) -> bool:
        """Mark the install cancelled: its webhook and install tokens stop working at once.
        True for the one call that cancelled it (False: it already was)."""
        install_id = doc["_id"]
        unset = {"webhookTokenHash": "", "webhookTokenEncrypted": ""}
        if self.traits(doc["platform"]).deprovision_on_delete:
            unset["credentialsEncrypted"] = ""  # its agents are gone upstream: nothing left to call
        # Only the call that moves the install to cancelled gives its template slot back
        # (svc/templates/claims.py; docs/consistency.md).
        cancelled = await self.store.installs.find_one_and_update(
            {"_id": install_id, "status": {"$ne": "cancelled"}},
            {
                "$set": {"status": "cancelled", "cancelledAt": utcnow(), "updatedAt": utcnow()},
                "$unset": unset,
            },
            {"templateId": 1},
        )
        await self.credentials.revoke_install_tokens(install_id)
        if cancelled is None:
            return False
        await release_install(self.store, cancelled["templateId"])
        return True

    # ---- helpers ---------------------------------------------------------------------
