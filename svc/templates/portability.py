"""Templates out and in: a self-contained export document, importing one as a draft, and the
structured diff of two published versions (docs/templates.md).

The export format is described by the JSON Schema served at /api/schema/template-export/v1.json.
An import never takes ownership, ids or dates from the document, nor its pricing unless asked;
a taken slug gets a suffix.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from svc.core import BadRequest, Conflict, Document, NotFound, RequestBody, Store, describe, iso
from svc.identity import Principal
from svc.templates.definitions import TeamDefinition
from svc.templates.resources import (
    SLUG_PATTERN,
    CreateTemplateBody,
    PricingModel,
    Visibility,
    check_pricing,
)
from svc.templates.templates import Templates
from svc.templates.versioning import structured_diff

FORMAT = "svc.template"
FORMAT_VERSION = 1
MAX_VERSIONS = 500
SLUG_ATTEMPTS = 20


class ExportedPricing(BaseModel):
    """The template's price when exported."""

    model_config = ConfigDict(extra="forbid")

    pricingModel: PricingModel
    priceUsdCents: int | None = Field(default=None, ge=1, le=1_000_000)


class ExportedVersion(BaseModel):
    """One published version, with its change log."""

    model_config = ConfigDict(extra="forbid")

    version: int = Field(ge=1, le=1_000_000)
    semver: str = Field(max_length=32)
    bump: str = Field(max_length=16)
    changeLog: str | None = Field(default=None, max_length=10_000)
    publishedAt: str | None = Field(default=None, max_length=40)
    definition: dict[str, Any]


class TemplateExport(BaseModel):
    """An exported template (format `svc.template`, version 1)."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["svc.template"]
    formatVersion: int = Field(ge=1, le=1_000_000)
    name: str = Field(min_length=1, max_length=200)
    slug: str = Field(pattern=SLUG_PATTERN, max_length=64)
    description: str = Field(default="", max_length=5000)
    visibility: Visibility = "team"
    forkable: bool = True
    definition: TeamDefinition
    pricing: ExportedPricing | None = None
    versions: list[ExportedVersion] | None = Field(default=None, max_length=MAX_VERSIONS)


class ImportQuery(RequestBody):
    """Query of POST /api/templates/import."""

    pricing: bool = False


def export_schema() -> dict[str, Any]:
    """JSON Schema (draft-07) of the export document."""
    schema = TemplateExport.model_json_schema(ref_template="#/definitions/{model}")
    definitions = schema.pop("$defs", {})
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$id": "/api/schema/template-export/v1.json",
        **schema,
        "definitions": definitions,
    }


class Portability:
    """Export, import and version diffs over the templates package's own collections."""

    def __init__(self, store: Store, templates: Templates) -> None:
        self.store = store
        self.templates = templates

    async def export(self, principal: Principal | None, template_id: str, history: bool) -> dict[str, Any]:
        """The export document of a template the caller may see (its history when asked)."""
        template = await self.templates.get(principal, template_id)
        document: dict[str, Any] = {
            "format": FORMAT,
            "formatVersion": FORMAT_VERSION,
            "name": template["name"],
            "slug": template["slug"],
            "description": template["description"],
            "visibility": template["visibility"],
            "forkable": template["forkable"],
            "definition": template["definition"],
            "pricing": {"pricingModel": template["pricingModel"], "priceUsdCents": template["priceUsdCents"]},
        }
        if history:
            document["versions"] = [
                {
                    "version": snap["version"],
                    "semver": snap["semver"],
                    "bump": snap["bump"],
                    "changeLog": snap.get("changeLog"),
                    "publishedAt": iso(snap["publishedAt"]),
                    "definition": snap["definition"],
                }
                for snap in await self._snapshots(template["id"])
            ]
        return document

    async def import_draft(self, principal: Principal, raw: Any, with_pricing: bool) -> dict[str, Any]:
        """A new draft owned by the caller from an export document; 400 naming what is wrong."""
        if not isinstance(raw, dict):
            raise BadRequest("Request body must be a JSON object (an exported template)")
        version = raw.get("formatVersion")
        if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
            raise BadRequest(
                f"formatVersion: {version} is newer than this service reads (up to {FORMAT_VERSION})"
            )
        try:
            document = TemplateExport.model_validate(raw)
        except ValidationError as exc:
            raise BadRequest(describe(exc)) from None
        pricing = document.pricing if with_pricing and document.pricing is not None else None
        if pricing is not None:
            check_pricing(pricing.pricingModel, pricing.priceUsdCents)
        body = CreateTemplateBody(
            slug=document.slug,
            name=document.name,
            description=document.description,
            visibility=document.visibility,
            definition=document.definition,
            forkable=document.forkable,
            pricingModel=pricing.pricingModel if pricing else "free",
            priceUsdCents=pricing.priceUsdCents if pricing else None,
        )
        for attempt in range(SLUG_ATTEMPTS):
            candidate = document.slug if attempt == 0 else f"{document.slug[:58]}-{attempt + 1}"
            try:
                return await self.templates.create(principal, body.model_copy(update={"slug": candidate}))
            except Conflict:
                continue
        raise Conflict(f"Slug {document.slug!r} and its numbered variants are taken; rename it first")

    async def diff(self, principal: Principal | None, template_id: str, a: str, b: str) -> dict[str, Any]:
        """The structured diff from published version `a` to `b` (numbers or semvers)."""
        template, old, new = await self.pair(principal, template_id, a, b)
        return {
            "templateId": template["id"],
            "from": {"version": old["version"], "semver": old["semver"]},
            "to": {"version": new["version"], "semver": new["semver"]},
            **structured_diff(old["definition"], new["definition"]),
        }

    async def pair(
        self, principal: Principal | None, template_id: str, a: str, b: str
    ) -> tuple[dict[str, Any], Document, Document]:
        """The template and its published versions `a` and `b` (numbers or semvers), definitions
        included: what `diff` compares, and what the dashboard's diff page shows line by line."""
        template = await self.templates.get(principal, template_id)
        snapshots = await self._snapshots(template["id"])
        return template, _find(snapshots, a), _find(snapshots, b)

    async def _snapshots(self, template_id: str) -> list[Document]:
        return (
            await self.store["template_versions"]
            .find({"templateId": template_id})
            .sort("version", 1)
            .to_list(MAX_VERSIONS)
        )


def _find(snapshots: list[Document], wanted: str) -> Document:
    """A published version by number (`3`) or semver (`1.2.0`); 404 otherwise."""
    for snap in snapshots:
        if wanted in (str(snap["version"]), snap["semver"]):
            return snap
    raise NotFound(f"Version {wanted!r} not found")
