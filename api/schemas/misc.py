"""Responses of the health check and of the two generated documents."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import ConfigDict, Field

from api.schemas.common import FreeForm, Reply


class Health(Reply):
    """GET /api/health when every dependency answers (503 {error, status, checks} otherwise)."""

    status: Literal["ok"]
    checks: dict[str, str] = Field(description="dependency name to `ok` or `unreachable`")


class OpenAPIDocument(Reply):
    """GET /api/openapi.json: an OpenAPI 3.1 document."""

    model_config = ConfigDict(extra="allow")

    openapi: str
    info: dict[str, object]
    paths: dict[str, object]
    components: dict[str, object]


class TeamSchemaDocument(FreeForm):
    """GET /api/schema/team/v1.json: JSON Schema draft-07 of a team definition."""

    media_type: ClassVar[str] = "application/schema+json"
