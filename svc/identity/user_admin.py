"""Operators disabling and deleting accounts (`svc users disable|enable|delete`).

A credential is only as good as its account: resolving a key or a session checks
that the user still exists and is not disabled (`Accounts.get_user`), so both stop
working at once in this process and within the credential cache's TTL (2 s) in
any other. Disabling also deletes the sessions (a re-enabled user signs in again);
keys are kept, refused while disabled. Deleting ends sessions and keys for good
and tombstones the account: the record stays so ids in templates, installs and
audit logs still resolve, with no email, name, handle or password left.
"""

from __future__ import annotations

from typing import Any

from svc.core import Conflict, Document, NotFound, OrgLookups, Store, TTLCache, iso, utcnow
from svc.identity.accounts import Accounts, normalise_email
from svc.identity.credentials import Principal


class UserAdmin:
    """Disable, enable and delete accounts; the `users`, `sessions` and `api_keys` writes of it."""

    def __init__(
        self, store: Store, accounts: Accounts, key_cache: TTLCache[str, Principal], *, orgs: OrgLookups
    ) -> None:
        self.store = store
        self.orgs = orgs  # whether a user owns an org (svc/wiring.py hands in the orgs' answer)
        self.accounts = accounts
        self.key_cache = key_cache

    async def find(self, who: str) -> Document:
        """The account by id or email; 404 when there is none (or it was deleted)."""
        user = await self.store.users.find_one(
            {"$or": [{"_id": who}, {"email": normalise_email(who) if "@" in who else who}]}
        )
        if user is None or user.get("deletedAt") is not None:
            raise NotFound("User not found")
        return user

    async def disable(self, who: str) -> dict[str, Any]:
        """Refuse the user's keys and end their sessions now; reversible with `enable`."""
        user = await self.find(who)
        now = utcnow()
        await self.store.users.update_one(
            {"_id": user["_id"]}, {"$set": {"disabled": True, "disabledAt": now}}
        )
        sessions = await self._end_credentials(user["_id"], delete_keys=False)
        return {"userId": user["_id"], "disabled": True, "disabledAt": iso(now), "sessionsEnded": sessions}

    async def enable(self, who: str) -> dict[str, Any]:
        """Let a disabled user's keys work again and let them sign in."""
        user = await self.find(who)
        await self.store.users.update_one(
            {"_id": user["_id"]}, {"$set": {"disabled": False}, "$unset": {"disabledAt": ""}}
        )
        self.accounts.forget_user(user["_id"])
        return {"userId": user["_id"], "disabled": False}

    async def tombstone(self, who: str) -> dict[str, Any]:
        """End every session and key for good and strip the account to a tombstone.

        409 while the user owns an org: ownership is transferred (or the org deleted) first,
        so no org is left without an owner.
        """
        user = await self.find(who)
        if await self.orgs.owns_an_org(user["_id"]):
            raise Conflict("The user owns an org; transfer it or delete it first")
        now = utcnow()
        await self.store.users.update_one(
            {"_id": user["_id"]},
            {
                "$set": {
                    "disabled": True,
                    "deletedAt": now,
                    "email": f"deleted-{user['_id']}@deleted.invalid",
                },
                "$unset": {"passwordHash": "", "name": "", "handle": "", "payout": ""},
            },
        )
        sessions = await self._end_credentials(user["_id"], delete_keys=True)
        return {"userId": user["_id"], "deleted": True, "deletedAt": iso(now), "sessionsEnded": sessions}

    async def _end_credentials(self, user_id: str, delete_keys: bool) -> int:
        """Delete the user's sessions (and keys when asked); drop every cached resolution of them."""
        keys = await self.store.api_keys.find({"userId": user_id}, {"keyHash": 1}).to_list(None)
        for key in keys:
            self.key_cache.revoke(key["keyHash"])
        if delete_keys:
            await self.store.api_keys.delete_many({"userId": user_id})
        ended = await self.store.sessions.delete_many({"userId": user_id})
        self.accounts.forget_user(user_id)
        return ended.deleted_count
