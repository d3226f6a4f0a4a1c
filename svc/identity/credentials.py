"""Turn a presented credential into a Principal, for every auth code of the spec.

One function per kind of credential. Each rejects with the spec's error text
and touches the database at most once (app keys not at all).
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from config.parsing import AppKey
from svc.core import (
    Forbidden,
    InstallLookups,
    NotFound,
    OrgLookups,
    Store,
    TTLCache,
    Unauthorized,
    credential_digest,
    is_api_key,
    is_install_token,
    new_install_token,
    utcnow,
)
from svc.identity.accounts import Accounts

Via = Literal["key", "session", "app_key", "install_token", "webhook_token"]

INVALID_KEY = "Invalid API key"
INVALID_INSTALL_TOKEN = "Invalid install token"
WEBHOOK_NOT_FOUND = "Webhook token not found"


@dataclass(frozen=True)
class Principal:
    """Who is calling. Exactly one of user_id / org_id is set for keys and sessions."""

    via: Via
    user_id: str | None = None
    org_id: str | None = None
    key_id: str | None = None
    # For keys: the install the key is scoped to. For tokens: the install they belong to.
    install_id: str | None = None
    # For personal keys: the svc install the key created last (whoami only; it takes no right away).
    linked_install_id: str | None = None


def require_unscoped(principal: Principal) -> None:
    """403 for a key scoped to one install: it may act on that install only."""
    if principal.via == "key" and principal.install_id is not None:
        raise Forbidden(
            f"This key is scoped to install {principal.install_id} and can act only on it; "
            "use an unscoped key"
        )


class Credentials:
    """Resolves API keys, sessions, app keys, install tokens and webhook tokens."""

    def __init__(
        self,
        store: Store,
        accounts: Accounts,
        app_keys: Sequence[AppKey],
        key_cache: TTLCache[str, Principal],
        *,
        installs: InstallLookups,
        orgs: OrgLookups,
    ) -> None:
        self.store = store
        # The answers of the packages above (svc/wiring.py hands them in): which install a
        # webhook token names, and the org a key speaks for.
        self.installs = installs
        self.orgs = orgs
        self.accounts = accounts
        self.key_cache = key_cache
        # Compare digests, so every configured key costs the same to test.
        self._app_keys = [(credential_digest(k.key).encode(), k.install_id) for k in app_keys if k.key]

    async def from_api_key(self, raw: str) -> Principal:
        """A personal or org key (`svc_live_…`); 401 `Invalid API key` otherwise."""
        if not is_api_key(raw):
            raise Unauthorized(INVALID_KEY)
        key_hash = credential_digest(raw)
        cached = self.key_cache.get(key_hash)
        if cached is not None:
            return await self._live_owner(cached)
        doc = await self.store.api_keys.find_one({"keyHash": key_hash})
        if doc is None:
            raise Unauthorized(INVALID_KEY)
        caller = Principal(
            via="key",
            user_id=doc.get("userId"),
            org_id=doc.get("orgId"),
            key_id=doc["_id"],
            install_id=doc.get("installId"),
            linked_install_id=doc.get("linkedInstallId"),
        )
        self.key_cache.put(key_hash, caller)
        return await self._live_owner(caller)

    async def _live_owner(self, caller: Principal) -> Principal:
        """The key's principal while its user exists and is not disabled; else `Invalid API key`."""
        if caller.user_id is not None:
            try:
                await self.accounts.get_user(caller.user_id)
            except Unauthorized:
                raise Unauthorized(INVALID_KEY) from None
        return caller

    async def from_session(self, token: str) -> Principal:
        """The `svc_session` cookie; 401 `Not authenticated` or `Session expired`."""
        user_id = await self.accounts.session_user_id(token)
        await self.accounts.get_user(user_id)  # 401 once the account is disabled or deleted
        return Principal(via="session", user_id=user_id)

    def from_app_key(self, raw: str) -> Principal:
        """An application key from APP_API_KEYS; 401 `Invalid API key` otherwise."""
        presented = credential_digest(raw).encode()
        found: Principal | None = None
        for expected, install_id in self._app_keys:
            if hmac.compare_digest(presented, expected) and found is None:
                found = Principal(via="app_key", install_id=install_id)
        if found is None:
            raise Unauthorized(INVALID_KEY)
        return found

    async def from_install_token(self, raw: str) -> Principal:
        """`svc_install_…` from the bearer header; 401 `Invalid install token` otherwise."""
        if not is_install_token(raw):
            raise Unauthorized(INVALID_INSTALL_TOKEN)
        doc = await self.store.install_tokens.find_one({"_id": credential_digest(raw)})
        if doc is None:
            raise Unauthorized(INVALID_INSTALL_TOKEN)
        return Principal(via="install_token", install_id=doc["installId"])

    async def from_webhook_token(self, token: str) -> Principal:
        """The token in a webhook path; 404 `Webhook token not found` otherwise."""
        if not token or len(token) > 128:
            raise NotFound(WEBHOOK_NOT_FOUND)
        install_id = await self.installs.webhook_install_id(token)
        if install_id is None:
            raise NotFound(WEBHOOK_NOT_FOUND)
        return Principal(via="webhook_token", install_id=install_id)

    async def issue_install_token(self, install_id: str) -> str:
        """A new install token for ingest; only its hash is stored."""
        raw = new_install_token()
        await self.store.install_tokens.insert_one(
            {"_id": credential_digest(raw), "installId": install_id, "createdAt": utcnow()}
        )
        return raw

    async def revoke_install_tokens(self, install_id: str) -> None:
        """Every install token of the install stops working at once."""
        await self.store.install_tokens.delete_many({"installId": install_id})

    async def link_key(self, principal: Principal, install_id: str) -> None:
        """Link the creating personal key to a new managed install (spec: so whoami resolves); the
        key keeps every right it had: only a key created with `installId` is restricted
        (docs/auth.md). Org keys are shared by the org and are not linked (docs/orgs.md)."""
        if principal.via != "key" or principal.key_id is None or principal.org_id is not None:
            return
        doc = await self.store.api_keys.find_one_and_update(
            {"_id": principal.key_id}, {"$set": {"linkedInstallId": install_id}}
        )
        if doc is not None:
            self.key_cache.discard(doc["keyHash"])

    async def key_identity(self, principal: Principal) -> dict[str, Any]:
        """{userName, orgName, orgSlug} for GET /api/auth/key-identity."""
        user_name: str | None = None
        if principal.user_id is not None:
            user = await self.accounts.get_user(principal.user_id)
            user_name = user["name"]
        org = await self.orgs.key_org(principal.user_id, principal.org_id)
        return {
            "userName": user_name,
            "orgName": org["name"] if org else None,
            "orgSlug": org["slug"] if org else None,
        }
