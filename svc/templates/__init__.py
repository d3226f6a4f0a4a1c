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
from svc.templates.eval_fields import MAX_CASES, EvalSuite
from svc.templates.eval_gate import PublishGate, note_scorecard
from svc.templates.lookups import (
    find_template,
    find_templates,
    org_templates,
    paid_templates,
    template_by_id_or_slug,
)
from svc.templates.mcp_fields import MAX_AGENT_SERVERS, McpServer, parse_argument_path
from svc.templates.owner_archive import archive_user_templates
from svc.templates.permissions import widened_agents, widens
from svc.templates.portability import ImportQuery, Portability, export_schema
from svc.templates.price_changes import display as price_label
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
    ScorecardSummary,
    TemplateList,
    TemplateOut,
    UpdateTemplateBody,
    VersionList,
    is_owner,
    owned_by,
    owner_of,
    view,
)
from svc.templates.templates import Templates
from svc.templates.version_reads import (
    published_version,
    releases_after,
    template_head,
    template_heads,
    version_log,
)
from svc.templates.versioning import diff_summary, structured_diff, upgrade_bump

__all__ = [
    "LIST_DEFAULT",
    "LIST_MAX",
    "MAX_AGENT_SERVERS",
    "MAX_CASES",
    "PLATFORM_FEE_PERCENT",
    "VARIABLE_REFERENCE",
    "AccessPolicy",
    "CreateTemplateBody",
    "Definitions",
    "EvalSuite",
    "ImportQuery",
    "McpServer",
    "Portability",
    "PricingBody",
    "PricingOut",
    "PublishBody",
    "PublishGate",
    "Report",
    "RollbackBody",
    "ScorecardSummary",
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
    "find_template",
    "find_templates",
    "hierarchy_depth",
    "is_owner",
    "json_schema",
    "next_period_start",
    "note_scorecard",
    "org_templates",
    "owned_by",
    "owner_of",
    "paid_templates",
    "parse_argument_path",
    "period_start",
    "price_in_force",
    "price_label",
    "published_version",
    "release_install",
    "releases_after",
    "structured_diff",
    "template_by_id_or_slug",
    "template_head",
    "template_heads",
    "upgrade_bump",
    "version_log",
    "view",
    "widened_agents",
    "widens",
]
