"""Team templates: definitions and their schema, the lifecycle, versions and their classification."""

from svc.templates.checking import Definitions, Report, ValidateBody
from svc.templates.claims import backfill_install_counts, claim_install, release_install
from svc.templates.definitions import (
    VARIABLE_REFERENCE,
    AccessPolicy,
    TeamDefinition,
    check_definition,
    hierarchy_depth,
    json_schema,
)
from svc.templates.mcp_fields import MAX_AGENT_SERVERS, McpServer, parse_argument_path
from svc.templates.owner_archive import archive_user_templates
from svc.templates.portability import ImportQuery, Portability, export_schema
from svc.templates.price_changes import next_period_start, period_start, price_in_force
from svc.templates.resources import (
    LIST_DEFAULT,
    LIST_MAX,
    PLATFORM_FEE_PERCENT,
    CreateTemplateBody,
    PricingBody,
    PricingOut,
    PublishBody,
    RollbackBody,
    TemplateList,
    TemplateOut,
    UpdateTemplateBody,
    VersionList,
    is_owner,
    owner_of,
    view,
)
from svc.templates.templates import Templates
from svc.templates.versioning import diff_summary

__all__ = [
    "LIST_DEFAULT",
    "LIST_MAX",
    "MAX_AGENT_SERVERS",
    "PLATFORM_FEE_PERCENT",
    "VARIABLE_REFERENCE",
    "AccessPolicy",
    "CreateTemplateBody",
    "Definitions",
    "ImportQuery",
    "McpServer",
    "Portability",
    "PricingBody",
    "PricingOut",
    "PublishBody",
    "Report",
    "RollbackBody",
    "TeamDefinition",
    "TemplateList",
    "TemplateOut",
    "Templates",
    "UpdateTemplateBody",
    "ValidateBody",
    "VersionList",
    "archive_user_templates",
    "backfill_install_counts",
    "check_definition",
    "claim_install",
    "diff_summary",
    "export_schema",
    "hierarchy_depth",
    "is_owner",
    "json_schema",
    "next_period_start",
    "owner_of",
    "parse_argument_path",
    "period_start",
    "price_in_force",
    "release_install",
    "view",
]
