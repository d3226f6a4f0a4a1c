"""Responses of sessions, the profile and personal keys (spec "Accounts and keys")."""

from __future__ import annotations

from pydantic import BaseModel, Field

from api.schemas.common import Reply, Timestamp


class User(Reply):
    """The User resource (never a password hash)."""

    id: str
    email: str
    name: str
    avatarUrl: str | None
    githubConnected: bool
    handle: str | None = Field(description="URL-safe; null until set")
    handleLocked: bool = Field(description="true once the handle was changed once")


class UserReply(Reply):
    """Sign-up (201) and login: the user; the session arrives in the `svc_session` cookie."""

    user: User


class HandleReply(Reply):
    """PATCH /api/auth/me."""

    ok: bool
    handle: str


class PersonalKey(BaseModel):
    """A personal key with its full value (the spec lists values to their owner)."""

    id: str
    key: str = Field(description="svc_live_<32 hex>")
    label: str | None
    installId: str | None = Field(description="the one install the key is scoped to, or null")
    createdAt: Timestamp


class PersonalKeyList(Reply):
    """GET /api/auth/keys: newest first."""

    keys: list[PersonalKey]


class CreatedPersonalKey(PersonalKey, Reply):
    """POST /api/auth/keys (201)."""

    note: str


class KeyIdentity(Reply):
    """GET /api/auth/key-identity: the org fields are null without an org."""

    userName: str | None
    orgName: str | None
    orgSlug: str | None
