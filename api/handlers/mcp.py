"""MCP: the operator catalogue's names, an install's servers and tools with consent, approvals."""

from __future__ import annotations

from aiohttp import web

from api.context import principal, services
from api.handlers.console import acting
from api.routing import RouteTable
from api.schemas.mcp import (
    McpApprovalList,
    McpApprovalReply,
    McpCatalogueList,
    McpConsentReply,
    McpInstallView,
)
from svc.runtime import McpApprovalDecisionBody, McpApprovalQuery, McpConsentBody, McpInstalls

routes = RouteTable()


@routes.get("/api/mcp/servers", auth="K", response=McpCatalogueList)
async def mcp_catalogue(request: web.Request) -> web.Response:
    """The names of the operator's MCP servers a template may use (`catalogue` in mcpServers)."""
    return web.json_response({"servers": services(request).mcp.catalogue.describe()})


@routes.get("/api/installs/{id}/mcp", auth="K/S", response=McpInstallView)
async def mcp_install_servers(request: web.Request) -> web.Response:
    """The install's MCP servers, their tools now, and the deployer's decisions on each."""
    svc = services(request)
    install = await svc.installs.owned(principal(request), request.match_info["id"])
    secrets = await svc.install_runner.secrets_of(install)
    return web.json_response(await McpInstalls(svc.mcp).view(install, secrets))


@routes.post("/api/installs/{id}/mcp/consent", auth="K/S", body=McpConsentBody, response=McpConsentReply)
async def mcp_consent(request: web.Request, body: McpConsentBody) -> web.Response:
    """Accept (pinning the definition shown) or refuse tools of the install's MCP servers."""
    svc = services(request)
    who = principal(request)
    install = await svc.installs.owned(who, request.match_info["id"])
    secrets = await svc.install_runner.secrets_of(install)
    return web.json_response(
        await McpInstalls(svc.mcp).decide(install, secrets, body, who.user_id or who.org_id)
    )


@routes.get("/api/installs/{id}/mcp/approvals", auth="K/S", query=McpApprovalQuery, response=McpApprovalList)
async def mcp_approvals(request: web.Request, query: McpApprovalQuery) -> web.Response:
    """Requests to approve exact MCP tool calls, newest first (at most 100)."""
    svc = services(request)
    install = await svc.installs.owned(principal(request), request.match_info["id"])
    return web.json_response(await McpInstalls(svc.mcp).approvals(install, query.status))


@routes.post(
    "/api/installs/{id}/mcp/approvals/{approvalId}",
    auth="K/S",
    body=McpApprovalDecisionBody,
    response=McpApprovalReply,
)
async def decide_mcp_approval(request: web.Request, body: McpApprovalDecisionBody) -> web.Response:
    """Approve (once, within an hour) or reject one exact tool call."""
    svc = services(request)
    who = principal(request)
    install = await svc.installs.owned(who, request.match_info["id"])
    approval_id = request.match_info["approvalId"]
    result = await McpInstalls(svc.mcp).decide_approval(
        install, approval_id, body.decision, who.user_id or who.org_id
    )
    # The run that waits at this call's gate goes on with the decision (a run not waiting: nothing).
    await svc.run_service.resume_approval(
        who, install["_id"], approval_id, body.decision, await acting(request)
    )
    return web.json_response(result)
