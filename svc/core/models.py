"""Base classes for request bodies: strict types, unknown fields ignored.

Strict mode means `"5"` is not an integer and `1` is not a string, so a wrong
type is refused rather than guessed at. Unknown fields (`owner`, `plan`, ...)
are dropped, never written.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

EARLIEST, LATEST = datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC)


def _bounded(value: datetime) -> datetime:
    """UTC (a time without a zone is UTC), between 2000 and 2100: arithmetic on it cannot overflow."""
    try:
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except OverflowError:
        raise ValueError("must be between 2000-01-01 and 2100-01-01") from None
    if not EARLIEST <= value < LATEST:
        raise ValueError("must be between 2000-01-01 and 2100-01-01")
    return value


# An ISO 8601 time in a body or query (text on the wire, even in strict bodies).
Timestamp = Annotated[datetime, Field(strict=False), AfterValidator(_bounded)]


class RequestBody(BaseModel):
    """A validated JSON request body."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


def field_path(location: tuple[int | str, ...]) -> str:
    """`("definition", "agents", 2, "model")` as `definition.agents[2].model`."""
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "body"


def describe(exc: ValidationError, limit: int = 5) -> str:
    """`field: problem` for each failure, naming the field by its JSON path."""
    parts = []
    for error in exc.errors(include_url=False)[:limit]:
        message = error["msg"].removeprefix("Value error, ")
        parts.append(f"{field_path(error['loc'])}: {message}")
    return "; ".join(parts)
