"""Org keys: shared by the org, shown once, managed by its owner and admins (stored by identity)."""

from __future__ import annotations

from typing import Any

from svc.core import NotFound
from svc.identity import ApiKeys
from svc.orgs.access import OrgAccess
from svc.orgs.bodies import OrgKeyBody
from svc.orgs.org_audit_log import AuditLog

MAX_ORG_KEYS = 100


class OrgKeys:
    """List, create and revoke an org's keys."""

    def __init__(self, org_access: OrgAccess, audit: AuditLog, api_keys: ApiKeys) -> None:
        self.org_access = org_access
        self.audit = audit
        self.api_keys = api_keys

    async def keys(self, user_id: str, slug: str) -> list[dict[str, Any]]:
        """The org's keys, newest first, without their values."""
        access = await self.org_access.check(user_id, slug, "keys.list")
        return await self.api_keys.list_for_org(access.org["_id"], MAX_ORG_KEYS)

    async def create_key(self, user_id: str, slug: str, body: OrgKeyBody) -> dict[str, Any]:
        """A new org key; the raw value is in this response only (only its hash is stored)."""
        access = await self.org_access.check(user_id, slug, "keys.create")
        org_id = access.org["_id"]
        created = await self.api_keys.create_for_org(org_id, body.label, user_id, MAX_ORG_KEYS)
        await self.audit.record(
            org_id, "key.created", access.actor, {"keyId": created["id"], "label": body.label}
        )
        return created

    async def revoke_key(self, user_id: str, slug: str, key_id: str) -> None:
        """Revoke at once: the next request with the key is 401."""
        access = await self.org_access.check(user_id, slug, "keys.revoke")
        if not await self.api_keys.revoke_org_keys(access.org["_id"], key_id):
            raise NotFound("Key not found")
        await self.audit.record(access.org["_id"], "key.revoked", access.actor, {"keyId": key_id})
