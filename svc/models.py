"""Base classes for request bodies: strict types, unknown fields ignored.

Strict mode means `"5"` is not an integer and `1` is not a string, so a wrong
type is refused rather than guessed at. Unknown fields (`owner`, `plan`, ...)
are dropped, never written.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationError


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
