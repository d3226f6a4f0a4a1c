"""Base classes for request bodies: strict types, unknown fields ignored.

Strict mode means `"5"` is not an integer and `1` is not a string, so a wrong
type is refused rather than guessed at. Unknown fields (`owner`, `plan`, ...)
are dropped, never written.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class RequestBody(BaseModel):
    """A validated JSON request body."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)
