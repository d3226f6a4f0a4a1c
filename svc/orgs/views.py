"""The spec's org resources, as answered by the API."""

from __future__ import annotations

from typing import Any

from svc.core import Document, iso


def org_view(doc: Document) -> dict[str, Any]:
    """The spec's Organisation resource."""
    return {
        "id": doc["_id"],
        "name": doc["name"],
        "slug": doc["slug"],
        "plan": doc.get("plan") or "free",
        "billingEmail": doc.get("billingEmail"),
        "avatarUrl": doc.get("avatarUrl"),
        "governanceEnabled": bool(doc.get("governanceEnabled")),
        "currentPeriodEnd": iso(doc.get("currentPeriodEnd")),
        "cancelAtPeriodEnd": bool(doc.get("cancelAtPeriodEnd")),
        "createdAt": iso(doc["createdAt"]),
        # Set once an owner or admin chose which version moves wait for approval (docs/upgrades.md).
        **({"upgradeApproval": doc["upgradeApproval"]} if doc.get("upgradeApproval") else {}),
        **({"requireEvalSuite": True} if doc.get("requireEvalSuite") else {}),
    }


def approval_view(doc: Document) -> dict[str, Any]:
    """The spec's Approval request."""
    return {
        "id": doc["_id"],
        "orgId": doc["orgId"],
        "installId": doc["installId"],
        "templateId": doc["templateId"],
        "templateName": doc["templateName"],
        "requestedBy": doc.get("requestedBy"),
        "requestedByEmail": doc.get("requestedByEmail"),
        "status": doc["status"],
        "note": doc.get("note"),
        "reviewedBy": doc.get("reviewedBy"),
        "reviewedByEmail": doc.get("reviewedByEmail"),
        "reviewedAt": iso(doc.get("reviewedAt")),
        "createdAt": iso(doc["createdAt"]),
        # A version move of an existing install, not a new deployment (docs/upgrades.md).
        **({"upgrade": upgrade_view(doc["upgrade"])} if doc.get("upgrade") else {}),
    }


def invitation_view(doc: Document) -> dict[str, Any]:
    """An invitation as listed (the token is never shown again)."""
    return {
        "id": doc["_id"],
        "email": doc["email"],
        "role": doc["role"],
        "invitedBy": doc.get("invitedBy"),
        "expiresAt": iso(doc["expiresAt"]),
        "createdAt": iso(doc["createdAt"]),
    }


def upgrade_view(upgrade: Document) -> dict[str, Any]:
    """The version move an approval request asks for."""
    return {k: upgrade[k] for k in ("fromVersion", "toVersion", "direction", "bump", "reason")}
