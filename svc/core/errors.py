"""Domain errors. The API layer maps each class to one HTTP status, in one place."""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    """A failure the caller can act on; `message` is safe to show to a client."""

    def __init__(self, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra


class BadRequest(ServiceError):
    """The request is malformed or a field is not valid."""


class Unauthorized(ServiceError):
    """No credential, or one that does not resolve."""


class PaymentRequired(ServiceError):
    """The feature needs a paid plan."""


class Forbidden(ServiceError):
    """The caller is known but may not do this."""


class NotFound(ServiceError):
    """The thing does not exist, or the caller may not know that it does."""


class Conflict(ServiceError):
    """The request clashes with the current state."""


class Gone(ServiceError):
    """The thing existed but is no longer usable (an expired invitation)."""


class Unprocessable(ServiceError):
    """Well-formed, but cannot be carried out (a missing snapshot, an upstream precondition)."""


class RateLimited(ServiceError):
    """Too many requests; `retry_after` is in whole seconds."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class BadGateway(ServiceError):
    """An upstream service refused or failed."""


class Unavailable(ServiceError):
    """A dependency is not configured or not reachable."""
