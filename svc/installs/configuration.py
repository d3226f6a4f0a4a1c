"""Configuring an install after it exists: variables, secrets and platform credentials (names
checked, values encrypted, never returned). A part of the `Installs` service
(svc/installs/installs.py), in a module of its own."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from config.settings import Settings
from plugins.manager import Plugins
from plugins.types import PlatformTraits
from svc.core import (
    BadRequest,
    Conflict,
    Document,
    Kind,
    Store,
    Vault,
    utcnow,
)
from svc.identity import Principal
from svc.installs.fields import (
    check_secret_names,
    check_variables,
    unwrap,
)
from svc.installs.remembered import RememberedSecrets
from svc.installs.secret_merge import merge_capped_secrets
from svc.templates import owner_of

log = logging.getLogger(__name__)


class InstallConfiguration:
    """The configuration half of `Installs` (a mixin: it uses the service's store, vault and reach)."""

    store: Store
    vault: Vault
    plugins: Plugins
    settings: Settings

    # Provided by `Installs` and `InstallRemoval`, which this completes.
    remembered: RememberedSecrets
    owned: Callable[[Principal, str], Awaitable[Document]]
    traits: Callable[[str], PlatformTraits]
    _audit: Callable[[Principal, str, Kind, str, dict[str, Any]], Awaitable[None]]
    _upstream_left: Callable[[Document], bool]
    _encrypt_json: Callable[[dict[str, Any]], str]
    _decrypt_json: Callable[[str | None], dict[str, Any]]

    async def set_variables(self, principal: Principal, install_id: str, body: Any) -> list[str]:
        """Merge variables (only the template's required ones); the keys updated."""
        doc = await self.owned(principal, install_id)
        values = check_variables(doc["definition"], unwrap(body, "variables"))
        await self.store.installs.update_one(
            {"_id": install_id},
            {"$set": {**{f"variables.{k}": v for k, v in values.items()}, "updatedAt": utcnow()}},
        )
        await self._audit(principal, install_id, "variable", "variables.set", {"keys": sorted(values)})
        return sorted(values)

    async def set_secrets(self, principal: Principal, install_id: str, body: Any) -> list[str]:
        """Merge secrets, encrypted; the keys updated (values are never logged or returned)."""
        doc = await self.owned(principal, install_id)
        if not self.traits(doc["platform"]).secrets_updatable:
            raise BadRequest(f"secrets are not accepted for platform {doc['platform']}")
        values = check_secret_names(unwrap(body, "secrets"))
        encrypted = {f"secretsEncrypted.{k}": self.vault.encrypt(v) for k, v in values.items()}
        await merge_capped_secrets(self.store, doc, encrypted)
        await self.remembered.remember(owner_of(principal), doc.get("companyId"), values)
        await self._audit(principal, install_id, "secret", "secrets.set", {"keys": sorted(values)})
        return sorted(values)

    async def set_credentials(self, principal: Principal, install_id: str, body: Any) -> list[str]:
        """Replace some of the install's platform credentials (a board key before it expires, a
        moved base URL); checked by the driver like at install time, stored encrypted, never
        returned. The keys updated."""
        doc = await self.owned(principal, install_id)
        platform = self.plugins.platform(doc["platform"])
        fields = {f.key for f in platform.credential_fields} if platform else set()
        if not fields:
            raise BadRequest(f"platform {doc['platform']} takes no credentials")
        if doc["status"] == "cancelled" and not self._upstream_left(doc):
            raise Conflict("Install is already cancelled")
        values = unwrap(body, "credentials")
        unknown = sorted(set(values) - fields)
        if unknown:
            raise BadRequest(f"credentials.{unknown[0]}: not a credential of platform {doc['platform']}")
        merged = {**self._decrypt_json(doc.get("credentialsEncrypted")), **values}
        checked = {"credentials": merged, "companyId": doc.get("companyId") or "-"}
        problems = await self.plugins.validate_install(doc["platform"], checked, doc["definition"])
        if problems:
            raise BadRequest("; ".join(problems))
        await self.store.installs.update_one(
            {"_id": install_id},
            {"$set": {"credentialsEncrypted": self._encrypt_json(merged), "updatedAt": utcnow()}},
        )
        await self._audit(principal, install_id, "secret", "credentials.set", {"keys": sorted(values)})
        return sorted(values)
