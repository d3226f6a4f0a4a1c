"""MCP servers for managed agents: the operator's catalogue, connections through the official SDK
(pooled per process), tool names, the deployer's consent with pinned definitions, and approvals
bound to the exact call. The policy's MCP rules and the agents' toolbox live in svc/runtime."""

from svc.mcp.approvals import Approvals, CallIdentity
from svc.mcp.approvals import view as approval_view
from svc.mcp.catalogue import Catalogue, Unavailable, secrets_named, substitute
from svc.mcp.client import Connection, McpFailure, Pool, Target, ToolInfo, tool_digest
from svc.mcp.consent import Consent, Pin, classify, suggested_rule
from svc.mcp.names import is_mcp_name, tool_name
from svc.mcp.warnings import install_warnings

__all__ = [
    "Approvals",
    "CallIdentity",
    "Catalogue",
    "Connection",
    "Consent",
    "McpFailure",
    "Pin",
    "Pool",
    "Target",
    "ToolInfo",
    "Unavailable",
    "approval_view",
    "classify",
    "install_warnings",
    "is_mcp_name",
    "secrets_named",
    "substitute",
    "suggested_rule",
    "tool_digest",
    "tool_name",
]
