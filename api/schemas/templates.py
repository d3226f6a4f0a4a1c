"""Responses of template export, version diffs and the export format's schema.

The template resource itself (TemplateOut, TemplateList, VersionList, PricingOut)
lives beside the lifecycle in svc.templates and is used as it is.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field

from api.schemas.common import FreeForm, Reply, Timestamp


class ExportSchemaDocument(FreeForm):
    """GET /api/schema/template-export/v1.json: JSON Schema draft-07 of the export document."""

    media_type: ClassVar[str] = "application/schema+json"


class ExportedPricingOut(BaseModel):
    """The template's price, when exported."""

    pricingModel: Literal["free", "per_run", "per_k_tokens"]
    priceUsdCents: int | None


class ExportedVersionOut(BaseModel):
    """One published version of the history."""

    version: int
    semver: str
    bump: str
    changeLog: str | None
    publishedAt: Timestamp | None
    definition: dict[str, Any]


class TemplateExportDocument(Reply):
    """GET /api/templates/:id/export, and the body of POST /api/templates/import.

    Its exact schema, with the definition's, is at /api/schema/template-export/v1.json.
    """

    format: Literal["svc.template"]
    formatVersion: int
    name: str
    slug: str
    description: str = ""
    visibility: Literal["team", "public"] = "team"
    forkable: bool = True
    definition: dict[str, Any] = Field(description="a team definition")
    pricing: ExportedPricingOut | None = None
    versions: list[ExportedVersionOut] | None = Field(default=None, description="with ?history=true")


class VersionRef(BaseModel):
    """A published version, by number and semver."""

    version: int
    semver: str


class Renamed(BaseModel):
    """An agent whose key changed (same display name)."""

    from_: str = Field(alias="from")
    to: str


class FieldChange(BaseModel):
    """One field of an agent, before and after."""

    field: str
    before: Any
    after: Any


class AgentChange(BaseModel):
    """An agent present in both versions, with the fields that changed."""

    key: str
    fields: list[FieldChange]


class AgentDiff(BaseModel):
    """Agents added, removed, renamed and changed."""

    added: list[str]
    removed: list[str]
    renamed: list[Renamed]
    changed: list[AgentChange]


class PolicyChange(BaseModel):
    """An agent's access policy, before and after."""

    agent: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None


class GateChange(BaseModel):
    """A gate present in both versions whose declaration changed."""

    name: str
    before: dict[str, Any]
    after: dict[str, Any]


class GateDiff(BaseModel):
    """Gates added, removed and changed."""

    added: list[str]
    removed: list[str]
    changed: list[GateChange]


class NameDiff(BaseModel):
    """Names added and removed (required variables or secrets)."""

    added: list[str]
    removed: list[str]


class VersionDiff(Reply):
    """GET /api/templates/:id/versions/:a/diff/:b: from `a` to `b`, with the bump it represents."""

    templateId: str
    from_: VersionRef = Field(alias="from")
    to: VersionRef
    bump: Literal["MAJOR", "MINOR", "PATCH"]
    reasons: list[str]
    agents: AgentDiff
    policies: list[PolicyChange]
    gates: GateDiff
    variables: NameDiff
    secrets: NameDiff


class DefinitionFinding(BaseModel):
    """One problem of a definition, at its field path (`definition.agents[0].model`)."""

    path: str
    message: str


class DefinitionReport(Reply):
    """POST /api/templates/validate: errors block publishing; warnings (a model whose provider is not
    configured on this server) do not."""

    valid: bool
    errors: list[DefinitionFinding]
    warnings: list[DefinitionFinding]
