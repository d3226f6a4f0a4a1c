"""Organisations: members and roles, invitations, org keys, plans, governance, secrets, audit, analytics."""

from svc.orgs.audit import SYSTEM, AuditQuery
from svc.orgs.org_analytics import AnalyticsQuery
from svc.orgs.orgs import (
    ApprovalDecisionBody,
    ApprovalRequestBody,
    ApprovalsQuery,
    CreateOrgBody,
    GovernanceBody,
    InvitationBody,
    OrgKeyBody,
    Orgs,
    RoleBody,
    SecretBody,
    TransferBody,
    UpdateOrgBody,
)

__all__ = [
    "SYSTEM",
    "AnalyticsQuery",
    "ApprovalDecisionBody",
    "ApprovalRequestBody",
    "ApprovalsQuery",
    "AuditQuery",
    "CreateOrgBody",
    "GovernanceBody",
    "InvitationBody",
    "OrgKeyBody",
    "Orgs",
    "RoleBody",
    "SecretBody",
    "TransferBody",
    "UpdateOrgBody",
]
