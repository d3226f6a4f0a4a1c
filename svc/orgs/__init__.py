"""Organisations: access rules, members, invitations, org keys, plans, governance, secrets, audit,
analytics. Each concern is a service of its own; `OrgAccess` is the one permission check."""

from svc.orgs.access import Access, OrgAccess
from svc.orgs.bodies import (
    ApprovalDecisionBody,
    ApprovalRequestBody,
    ApprovalsQuery,
    CreateOrgBody,
    GovernanceBody,
    InvitationBody,
    OrgKeyBody,
    RoleBody,
    SecretBody,
    TransferBody,
    UpdateOrgBody,
)
from svc.orgs.governance import Approvals, Governance
from svc.orgs.invitations import Invitations
from svc.orgs.lookups import (
    OrgReads,
    find_org,
    is_live,
    is_member,
    key_org,
    member_orgs,
    membership,
    org_id_where,
    owns_an_org,
    secret_names,
    secret_values,
)
from svc.orgs.org_analytics import AnalyticsQuery
from svc.orgs.org_audit_log import SYSTEM, AuditLog, AuditQuery
from svc.orgs.org_keys import OrgKeys
from svc.orgs.org_secrets import ENCRYPTED, OrgSecrets
from svc.orgs.orgs import Orgs
from svc.orgs.plans import Plan, Plans

__all__ = [
    "ENCRYPTED",
    "SYSTEM",
    "Access",
    "AnalyticsQuery",
    "ApprovalDecisionBody",
    "ApprovalRequestBody",
    "Approvals",
    "ApprovalsQuery",
    "AuditLog",
    "AuditQuery",
    "CreateOrgBody",
    "Governance",
    "GovernanceBody",
    "InvitationBody",
    "Invitations",
    "OrgAccess",
    "OrgKeyBody",
    "OrgKeys",
    "OrgReads",
    "OrgSecrets",
    "Orgs",
    "Plan",
    "Plans",
    "RoleBody",
    "SecretBody",
    "TransferBody",
    "UpdateOrgBody",
    "find_org",
    "is_live",
    "is_member",
    "key_org",
    "member_orgs",
    "membership",
    "org_id_where",
    "owns_an_org",
    "secret_names",
    "secret_values",
]
