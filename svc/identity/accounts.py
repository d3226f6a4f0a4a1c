"""User accounts and login sessions.

Passwords are hashed with scrypt; sessions are random cookie values stored by
their hash, living 30 days. An expired session is kept a further week (then the
TTL index removes it) so that a stale cookie gets `Session expired` rather than
`Not authenticated`.
"""

from __future__ import annotations

import asyncio
import re
from datetime import datetime, timedelta
from typing import Any

from pydantic import Field
from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError

from svc.core import (
    BadRequest,
    Conflict,
    DisplayName,
    Document,
    Forbidden,
    RequestBody,
    Store,
    TTLCache,
    Unauthorized,
    aware,
    credential_digest,
    new_id,
    new_session_token,
    utcnow,
)
from svc.identity import passwords

SESSION_LIFETIME = timedelta(days=30)
EXPIRED_SESSION_GRACE = timedelta(days=7)
HANDLE_MAX = 24
HANDLE_MIN = 2
EMAIL_PATTERN = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
HANDLE_INVALID = re.compile(r"[^a-z0-9_-]")


class SignupBody(RequestBody):
    """POST /api/auth/signup."""

    email: str = Field(max_length=254)
    password: str = Field(min_length=8, max_length=1024)
    name: DisplayName | None = Field(default=None, max_length=100)


class LoginBody(RequestBody):
    """POST /api/auth/login."""

    email: str = Field(max_length=254)
    password: str = Field(max_length=1024)


class HandleBody(RequestBody):
    """PATCH /api/auth/me."""

    handle: str | None = Field(default=None, max_length=200)


def normalise_email(raw: str) -> str:
    """Trimmed and lowercased; 400 when it does not look like an address."""
    email = raw.strip().lower()
    if not EMAIL_PATTERN.fullmatch(email):
        raise BadRequest("email: not a valid email address")
    return email


def normalise_handle(raw: str) -> str:
    """Lowercase, keep only a-z 0-9 _ -, truncate to 24 characters."""
    return HANDLE_INVALID.sub("", raw.lower())[:HANDLE_MAX]


def public_user(user: Document) -> dict[str, Any]:
    """The User resource of the spec (never the password hash)."""
    return {
        "id": user["_id"],
        "email": user["email"],
        "name": user["name"],
        "avatarUrl": user.get("avatarUrl"),
        "githubConnected": bool(user.get("githubConnected", False)),
        "handle": user.get("handle"),
        "handleLocked": bool(user.get("handleLocked", False)),
    }


class Accounts:
    """Sign-up, login, sessions and the profile handle."""

    def __init__(self, store: Store, password_cost: int = passwords.COST) -> None:
        self.store = store
        self.password_cost = password_cost
        # Hot-path caches (see svc/cache.py): session hash -> (user id, expiry), user id -> user.
        self._sessions: TTLCache[str, tuple[str, datetime]] = TTLCache()
        self._users: TTLCache[str, Document] = TTLCache()

    async def create_user(self, email: str, password: str, name: str | None = None) -> Document:
        """Store a new account; 409 when the email is taken."""
        email = normalise_email(email)
        if not 8 <= len(password) <= 1024:
            raise BadRequest("password: must be 8 to 1024 characters")
        password_hash = await asyncio.to_thread(passwords.hash_password, password, self.password_cost)
        user = {
            "_id": new_id(),
            "email": email,
            "name": (name or "").strip() or email.split("@", 1)[0],
            "passwordHash": password_hash,
            "avatarUrl": None,
            "githubConnected": False,
            "handle": None,
            "handleLocked": False,
            "keyCount": 0,
            "createdAt": utcnow(),
        }
        try:
            await self.store.users.insert_one(user)
        except DuplicateKeyError:
            raise Conflict("An account with this email already exists") from None
        return user

    async def signup(self, body: SignupBody) -> tuple[Document, str]:
        """Create the account and log it in."""
        user = await self.create_user(body.email, body.password, body.name)
        return user, await self.start_session(user["_id"])

    async def login(self, body: LoginBody) -> tuple[Document, str]:
        """Check the password and start a session; the same 401 for any mismatch."""
        user = await self.store.users.find_one({"email": body.email.strip().lower()})
        encoded = user["passwordHash"] if user else passwords.dummy_hash(self.password_cost)
        matches = await asyncio.to_thread(passwords.verify_password, body.password, encoded)
        if user is None or not matches or user.get("disabled"):
            raise Unauthorized("Invalid email or password")
        return user, await self.start_session(user["_id"])

    async def start_session(self, user_id: str) -> str:
        """A new session for the user; returns the cookie value."""
        token = new_session_token()
        now = utcnow()
        expires = now + SESSION_LIFETIME
        await self.store.sessions.insert_one(
            {
                "_id": credential_digest(token),
                "userId": user_id,
                "createdAt": now,
                "expiresAt": expires,
                "purgeAt": expires + EXPIRED_SESSION_GRACE,
            }
        )
        return token

    async def end_session(self, token: str) -> None:
        """Delete the session server-side (no error if it is already gone)."""
        session_id = credential_digest(token)
        self._sessions.revoke(session_id)
        await self.store.sessions.delete_one({"_id": session_id})

    async def session_user_id(self, token: str) -> str:
        """The user behind a cookie value; 401 `Not authenticated` or `Session expired`."""
        session_id = credential_digest(token)
        cached = self._sessions.get(session_id)
        if cached is None:
            session = await self.store.sessions.find_one({"_id": session_id}, {"userId": 1, "expiresAt": 1})
            if session is None:
                raise Unauthorized("Not authenticated")
            cached = (str(session["userId"]), aware(session["expiresAt"]))
            self._sessions.put(session_id, cached)
        user_id, expires = cached
        if expires <= utcnow():
            raise Unauthorized("Session expired")
        return user_id

    async def get_user(self, user_id: str) -> Document:
        """The account; 401 when it no longer exists (its credential is stale)."""
        user = self._users.get(user_id)
        if user is None:
            user = await self.store.users.find_one({"_id": user_id}, {"passwordHash": 0, "keyCount": 0})
            if user is None:
                raise Unauthorized("Not authenticated")
            self._users.put(user_id, user)
        # A disabled or deleted account's credentials are stale too (svc users disable|delete).
        if user.get("disabled") or user.get("deletedAt") is not None:
            raise Unauthorized("Not authenticated")
        return user

    def forget_user(self, user_id: str) -> None:
        """Drop the cached account so the next credential check reads it again."""
        self._users.revoke(user_id)

    async def set_handle(self, user_id: str, body: HandleBody) -> str:
        """Set the public handle once: normalised, 2 to 24 characters, unique."""
        if not body.handle or not body.handle.strip():
            raise BadRequest("Handle is required")
        handle = normalise_handle(body.handle)
        if len(handle) < HANDLE_MIN:
            raise BadRequest("Handle must be at least 2 characters")
        try:
            updated = await self.store.users.find_one_and_update(
                {"_id": user_id, "handleLocked": {"$ne": True}},
                {"$set": {"handle": handle, "handleLocked": True, "handleChangedAt": utcnow()}},
                return_document=ReturnDocument.AFTER,
            )
        except DuplicateKeyError:
            raise Conflict("That handle is already taken") from None
        finally:
            self._users.discard(user_id)
        if updated is None:
            await self.get_user(user_id)
            raise Forbidden("Handle can only be changed once")
        return handle

    async def set_payout_account(self, user_id: str, account_id: str) -> None:
        """Record the builder's payout account; the first one written wins (racing first calls)."""
        await self.store.users.update_one(
            {"_id": user_id, "payout.accountId": {"$exists": False}},
            {"$set": {"payout": {"accountId": account_id, "status": "pending_onboarding"}}},
        )

    async def set_payout_status(
        self, account_id: str, status: str, user_id: str | None = None
    ) -> Document | None:
        """Store the payout account's status as the provider reports it; the user before the change."""
        query: Document = {"payout.accountId": account_id, **({"_id": user_id} if user_id else {})}
        return await self.store.users.find_one_and_update(query, {"$set": {"payout.status": status}})
