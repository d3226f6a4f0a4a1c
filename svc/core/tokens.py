"""Credential values: their formats, how they are made and how they are looked up.

Every credential is looked up by the SHA-256 of its value. The values carry 128
bits or more of randomness, so a plain hash is enough (no salt, no KDF) and lets
the hash be a unique index.
"""

from __future__ import annotations

import hashlib
import re
import secrets

API_KEY_PREFIX = "svc_live_"
INSTALL_TOKEN_PREFIX = "svc_install_"
API_KEY_PATTERN = re.compile(r"svc_live_[0-9a-f]{32}")
INSTALL_TOKEN_PATTERN = re.compile(r"svc_install_[A-Za-z0-9_-]{32,64}")


def digest(value: str) -> str:
    """The look-up hash of a credential value."""
    return hashlib.sha256(value.encode()).hexdigest()


def new_api_key() -> str:
    """`svc_live_` and 32 hex characters (personal and org keys alike)."""
    return API_KEY_PREFIX + secrets.token_hex(16)


def new_install_token() -> str:
    """`svc_install_` and 43 URL-safe characters."""
    return INSTALL_TOKEN_PREFIX + secrets.token_urlsafe(32)


def new_session_token() -> str:
    """The value of the `svc_session` cookie."""
    return secrets.token_urlsafe(32)


def new_webhook_token() -> str:
    """The path credential of the no-auth webhook trigger."""
    return secrets.token_urlsafe(24)


def new_id() -> str:
    """An opaque identifier for stored records."""
    return secrets.token_hex(12)


def derived_id(*parts: object) -> str:
    """An identifier fixed by `parts`, in the shape of `new_id` (24 hex digits): a writer that may
    write a record twice (a retried run, a fire sent again) names it the same way each time."""
    return hashlib.sha256(":".join(str(part) for part in parts).encode()).hexdigest()[:24]


def is_api_key(value: str) -> bool:
    """True when the value has the shape of an API key (checked before any look-up)."""
    return API_KEY_PATTERN.fullmatch(value) is not None


def is_install_token(value: str) -> bool:
    """True when the value has the shape of an install token."""
    return INSTALL_TOKEN_PATTERN.fullmatch(value) is not None
