"""Request bodies of the org routes."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from svc.core import DisplayName, RequestBody


class CreateOrgBody(RequestBody):
    """POST /api/orgs."""

    name: DisplayName = Field(min_length=1, max_length=100)

    @field_validator("name")
    @classmethod
    def _trimmed(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value.strip()


class UpdateOrgBody(RequestBody):
    """PATCH /api/orgs/:slug (any of the fields)."""

    name: DisplayName | None = Field(default=None, min_length=1, max_length=100)
    billingEmail: str | None = Field(default=None, max_length=254)
    avatarUrl: str | None = Field(default=None, max_length=2048)

    @field_validator("avatarUrl")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and value and not re.match(r"^https?://[^\s/]+", value):
            raise ValueError("must be an http(s) URL")
        return value


class RoleBody(RequestBody):
    """PATCH /api/orgs/:slug/members/:userId/role."""

    role: str = Field(max_length=20)


class TransferBody(RequestBody):
    """PATCH /api/orgs/:slug/transfer."""

    newOwnerId: str = Field(min_length=1, max_length=64)
    confirmation: str = Field(max_length=200)


class InvitationBody(RequestBody):
    """POST /api/orgs/:slug/invitations."""

    email: str = Field(min_length=3, max_length=254)
    role: str = Field(default="member", max_length=20)


class OrgKeyBody(RequestBody):
    """POST /api/orgs/:slug/keys."""

    label: str | None = Field(default=None, max_length=100)


class GovernanceBody(RequestBody):
    """PATCH /api/orgs/:slug/settings/governance."""

    enabled: bool
    upgradeApproval: Literal["breaking", "all"] | None = Field(
        default=None,
        description="which version moves of installs wait for approval under governance: `breaking` "
        "(MAJOR or widening permissions; the default) or `all`; omitted: unchanged",
    )
    requireEvalSuite: bool | None = Field(
        default=None,
        description="the org's templates publish only with an eval suite that passes (docs/evals.md); "
        "omitted: unchanged",
    )


class ApprovalRequestBody(RequestBody):
    """POST /api/orgs/:slug/approvals."""

    installId: str = Field(min_length=1, max_length=64)
    templateId: str = Field(min_length=1, max_length=64)
    templateName: DisplayName = Field(min_length=1, max_length=200)


class ApprovalDecisionBody(RequestBody):
    """PATCH /api/orgs/:slug/approvals/:id."""

    status: Literal["approved", "rejected"]
    note: str | None = Field(default=None, max_length=2000)


class SecretBody(RequestBody):
    """POST /api/orgs/:slug/secrets."""

    key: str = Field(min_length=1, max_length=128)
    value: str = Field(min_length=1, max_length=65_536)


class ApprovalsQuery(RequestBody):
    """Query of GET /api/orgs/:slug/approvals."""

    status: Literal["pending", "approved", "rejected"] | None = None
