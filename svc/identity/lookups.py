"""What other packages read of accounts and keys: the identity package owns `users` and
`api_keys`; everyone else asks these functions (tests/test_architecture.py, ownership)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from svc.core import Document, Store, projection


async def find_user(store: Store, user_id: str, *fields: str) -> Document | None:
    """One account by id (only `fields` when named), or None."""
    return await store.users.find_one({"_id": user_id}, projection(fields))


async def find_users(store: Store, user_ids: Iterable[str], *fields: str) -> dict[str, Document]:
    """Accounts by id (only `fields` when named); the unknown ids are absent."""
    docs = await store.users.find({"_id": {"$in": list(user_ids)}}, projection(fields)).to_list(None)
    return {doc["_id"]: doc for doc in docs}


async def user_email(store: Store, user_id: str | None) -> str | None:
    """The account's email, or None (no such account, or none given)."""
    if not user_id:
        return None
    user = await find_user(store, user_id, "email")
    return (user or {}).get("email")


async def user_emails(store: Store, user_ids: Iterable[str]) -> dict[Any, str]:
    """Account id -> email, for the accounts that have one (keyed loosely: callers look up
    an id read from a document, which may be missing)."""
    users = await find_users(store, user_ids, "email")
    return {uid: doc["email"] for uid, doc in users.items() if "email" in doc}


async def user_id_by_email(store: Store, email: str) -> str | None:
    """The account registered with this (normalised) email, or None."""
    user = await store.users.find_one({"email": email}, {"_id": 1})
    return str(user["_id"]) if user else None


async def active_payout_accounts(store: Store, user_ids: Iterable[str]) -> dict[str, str]:
    """Account id -> payout account id, for the accounts whose payout onboarding is active."""
    ids = [uid for uid in user_ids if uid]
    return {
        user["_id"]: user["payout"]["accountId"]
        async for user in store.users.find({"_id": {"$in": ids}, "payout.status": "active"}, {"payout": 1})
    }


async def key_creator(store: Store, key_id: str) -> str | None:
    """The user who created an API key (None for an unknown key)."""
    key = await store.api_keys.find_one({"_id": key_id}, {"createdBy": 1})
    return (key or {}).get("createdBy")
