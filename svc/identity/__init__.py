"""Who is calling: accounts and sessions, passwords, personal keys, credential resolution, rate limits."""

from svc.identity.accounts import (
    EMAIL_PATTERN,
    SESSION_LIFETIME,
    Accounts,
    HandleBody,
    LoginBody,
    SignupBody,
    normalise_email,
    public_user,
)
from svc.identity.credentials import Credentials, Principal, require_unscoped
from svc.identity.keys import ENCRYPTED, ApiKeys, CreateKeyBody
from svc.identity.lookups import (
    active_payout_accounts,
    find_user,
    find_users,
    key_creator,
    user_email,
    user_emails,
    user_id_by_email,
)
from svc.identity.ratelimit import RateLimiter
from svc.identity.user_admin import UserAdmin

__all__ = [
    "EMAIL_PATTERN",
    "ENCRYPTED",
    "SESSION_LIFETIME",
    "Accounts",
    "ApiKeys",
    "CreateKeyBody",
    "Credentials",
    "HandleBody",
    "LoginBody",
    "Principal",
    "RateLimiter",
    "SignupBody",
    "UserAdmin",
    "active_payout_accounts",
    "find_user",
    "find_users",
    "key_creator",
    "normalise_email",
    "public_user",
    "require_unscoped",
    "user_email",
    "user_emails",
    "user_id_by_email",
]
