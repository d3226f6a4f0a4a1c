"""Time in one place: aware UTC datetimes in storage, ISO 8601 with `Z` on the wire."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import overload


def utcnow() -> datetime:
    """The current time, UTC, at millisecond precision (what MongoDB stores)."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


@overload
def iso(value: datetime) -> str: ...
@overload
def iso(value: datetime | None) -> str | None: ...
def iso(value: datetime | None) -> str | None:
    """`2026-11-21T23:46:55.123Z`, or None. Naive values (from the driver) are UTC."""
    if value is None:
        return None
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.isoformat(timespec="milliseconds") + "Z"


def aware(value: datetime) -> datetime:
    """Make a datetime read back from MongoDB (naive, UTC) timezone-aware."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
