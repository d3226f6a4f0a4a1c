"""The template resources: request bodies, pricing rules, ownership, views and list cursors."""

from __future__ import annotations

import base64
import binascii
import logging
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from svc.core import (
    BadRequest,
    DisplayName,
    DisplayText,
    Document,
    RequestBody,
    aware,
    iso,
    owner_filter,
)
from svc.identity import Principal
from svc.templates.definitions import TeamDefinition
from svc.templates.versioning import FIRST_SEMVER

log = logging.getLogger(__name__)

PLATFORM_FEE_PERCENT = 10
SLUG_PATTERN = r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$"
MAX_PRICE_CENTS = 1_000_000
LIST_DEFAULT, LIST_MAX = 50, 100
PricingModel = Literal["free", "per_run", "per_k_tokens"]
Visibility = Literal["team", "public"]


class Pricing(RequestBody):
    """The pricing pair and its rule: a positive price unless free, null when free."""

    pricingModel: PricingModel = "free"
    priceUsdCents: int | None = Field(default=None, ge=1, le=MAX_PRICE_CENTS, validate_default=True)

    @field_validator("priceUsdCents")
    @classmethod
    def _consistent(cls, price: int | None, info: ValidationInfo) -> int | None:
        check_pricing(info.data.get("pricingModel", "free"), price)
        return price


def check_pricing(model: str, price: int | None) -> None:
    """400 unless the price fits the pricing model."""
    if model == "free" and price is not None:
        raise ValueError("priceUsdCents must be null when pricingModel is free")
    if model != "free" and price is None:
        raise ValueError(f"priceUsdCents is required when pricingModel is {model}")


class CreateTemplateBody(Pricing):
    """POST /api/templates."""

    slug: str = Field(pattern=SLUG_PATTERN, max_length=64)
    name: DisplayName = Field(min_length=1, max_length=200)
    description: DisplayText = Field(default="", max_length=5000)
    ownerTeam: DisplayName = Field(default="", max_length=200)
    visibility: Visibility = "team"
    definition: TeamDefinition
    forkable: bool = True


class UpdateTemplateBody(RequestBody):
    """PATCH /api/templates/:draftId: any editable field."""

    definition: TeamDefinition | None = None
    changeLog: str | None = Field(default=None, max_length=10_000)
    name: DisplayName | None = Field(default=None, min_length=1, max_length=200)
    description: DisplayText | None = Field(default=None, max_length=5000)
    ownerTeam: DisplayName | None = Field(default=None, max_length=200)
    visibility: Visibility | None = None
    pricingModel: PricingModel | None = None
    priceUsdCents: int | None = Field(default=None, ge=1, le=MAX_PRICE_CENTS)
    forkable: bool | None = None


class PublishBody(RequestBody):
    """POST /api/templates/:id/publish."""

    changeLog: str | None = Field(default=None, max_length=10_000)


class RollbackBody(RequestBody):
    """POST /api/templates/:id/rollback."""

    # Bounded so a huge number is a 400 naming the field, not a 500 from the database (int64).
    version: int = Field(ge=1, le=2**31 - 1)


class PricingBody(Pricing):
    """PATCH /api/billing/pricing."""

    templateId: str = Field(min_length=1, max_length=64)
    pricingModel: PricingModel  # required here


NULLABLE_FIELDS = frozenset({"priceUsdCents", "changeLog"})

# Fields a version draft carries and merges into its parent on publish.
MERGED_FIELDS = (
    "name",
    "description",
    "ownerTeam",
    "visibility",
    "definition",
    "pricingModel",
    "priceUsdCents",
    "forkable",
    "changeLog",
)


def owner_of(principal: Principal) -> dict[str, str]:
    """The owner a credential acts as: its org for an org key, else its user."""
    if principal.org_id is not None:
        return {"kind": "org", "id": principal.org_id}
    assert principal.user_id is not None
    return {"kind": "user", "id": principal.user_id}


def owned_by(principal: Principal) -> Document:
    """The filter of the records the credential's owner holds (svc.core.owner_filter)."""
    return owner_filter(owner_of(principal))


def is_owner(principal: Principal | None, doc: Document) -> bool:
    """True when the credential acts as the template's owner."""
    return principal is not None and doc.get("owner") == owner_of(principal)


def is_listed(doc: Document) -> bool:
    """Published, public templates are visible to everyone."""
    return doc["kind"] == "template" and doc["status"] == "published" and doc["visibility"] == "public"


class ScorecardSummary(BaseModel):
    """The latest eval scorecard of a version, in brief (docs/evals.md)."""

    scorecardId: str
    version: int
    passed: bool
    passRate: float
    cases: int
    passedCases: int
    errorCases: int
    medianTokens: int
    medianCostCents: int
    policyCases: int
    policyPassed: int
    createdAt: str


class TemplateOut(BaseModel):
    """The Template resource as responses carry it (the OpenAPI schema; tests check responses fit)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    slug: str
    name: str
    description: str
    ownerTeam: str
    visibility: Visibility
    status: Literal["draft", "published", "archived"]
    version: int
    semver: str
    publishedAt: str | None
    changeLog: str | None
    definition: TeamDefinition
    pricingModel: PricingModel
    priceUsdCents: int | None
    forkable: bool
    createdAt: str
    updatedAt: str
    parentTemplateId: str | None = None
    forkedFromId: str | None = None
    parentId: str | None = Field(default=None, description="rollback responses: the published parent")
    rolledBackFrom: int | None = Field(default=None, description="rollback responses: the version restored")
    installCount: int | None = Field(default=None, description="archive responses: active installs")
    scorecard: ScorecardSummary | None = Field(
        default=None, description="the latest eval scorecard of the published version (docs/evals.md)"
    )


class TemplateList(BaseModel):
    """GET /api/templates."""

    templates: list[TemplateOut]
    nextCursor: str | None


class VersionOut(BaseModel):
    """One published version in the history."""

    version: int
    semver: str
    bump: Literal["INITIAL", "MAJOR", "MINOR", "PATCH"]
    changeLog: str | None
    publishedAt: str
    scorecard: ScorecardSummary | None = None


class VersionList(BaseModel):
    """GET /api/templates/:id/versions."""

    versions: list[VersionOut]


class PricingOut(BaseModel):
    """PATCH /api/billing/pricing."""

    id: str
    pricingModel: PricingModel
    priceUsdCents: int | None
    envelopeFeePercent: int
    effectiveFrom: str | None = Field(
        default=None,
        description="when the price takes effect: the next billing period for a published template, "
        "null when it applied at once (a draft)",
    )


def view(doc: Document, **extra: Any) -> dict[str, Any]:
    """The Template resource of the spec (shape: TemplateOut)."""
    out: dict[str, Any] = {
        "id": doc["_id"],
        "slug": doc["slug"],
        "name": doc["name"],
        "description": doc["description"],
        "ownerTeam": doc["ownerTeam"],
        "visibility": doc["visibility"],
        "status": doc["status"],
        "version": doc["version"],
        "semver": doc.get("semver", FIRST_SEMVER),
        "publishedAt": iso(doc.get("publishedAt")),
        "changeLog": doc.get("changeLog"),
        "definition": doc["definition"],
        "pricingModel": doc["pricingModel"],
        "priceUsdCents": doc["priceUsdCents"],
        "forkable": doc["forkable"],
        "createdAt": iso(doc["createdAt"]),
        "updatedAt": iso(doc["updatedAt"]),
    }
    if doc.get("parentTemplateId"):
        out["parentTemplateId"] = doc["parentTemplateId"]
    if doc.get("forkedFromId"):
        out["forkedFromId"] = doc["forkedFromId"]
    if doc.get("evalScorecard") and doc.get("status") == "published":
        out["scorecard"] = doc["evalScorecard"]
    out.update(extra)
    return out


def encode_cursor(doc: Document) -> str:
    """An opaque position after `doc` in the newest-first listing."""
    raw = f"{aware(doc['publishedAt']).isoformat()}|{doc['_id']}"
    return base64.urlsafe_b64encode(raw.encode()).decode()


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The position a cursor names; 400 when it is not one of ours."""
    try:
        stamp, _, doc_id = base64.urlsafe_b64decode(cursor.encode()).decode().partition("|")
        return datetime.fromisoformat(stamp), doc_id
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise BadRequest("cursor: not a valid cursor") from None
