"""Shapes shared by many responses, and the markers the OpenAPI builder reads.

A response model describes a body the handler already sends; nothing validates
responses at run time. The models exist so that `GET /api/openapi.json` states
every success body and so that the schemathesis test can hold each real response
against its declared shape.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

Timestamp = Annotated[str, Field(json_schema_extra={"format": "date-time"}, description="ISO 8601 UTC")]
Day = Annotated[str, Field(json_schema_extra={"format": "date"}, description="YYYY-MM-DD (UTC)")]


class Reply(BaseModel):
    """A JSON response body.

    `media_type` is the Content-Type the handler answers with; fields not listed
    here may appear (additive changes are not breaking), so the schemas do not
    forbid extra properties unless a model says so.
    """

    media_type: ClassVar[str] = "application/json"
    # Other forms of the same answer a client may ask for with Accept: media type to schema.
    also: ClassVar[dict[str, dict[str, Any]]] = {}


class Ok(Reply):
    """`{ok: true}`: the action was done."""

    ok: Literal[True]


class UrlReply(Reply):
    """`{url}`: a one-time link at the payment provider."""

    url: str


class EventStream(Reply):
    """A `text/event-stream` answer: each event is a `data: <json>` line holding one of `events`.

    The model is the union of the event shapes; the OpenAPI builder documents it
    under the event-stream media type (and as `x-sse-events`), not as a JSON body.
    """

    media_type: ClassVar[str] = "text/event-stream"


class FreeForm(RootModel[dict[str, Any]]):
    """A JSON object whose shape is defined elsewhere (a generated document)."""

    model_config = ConfigDict(json_schema_extra={"type": "object"})
