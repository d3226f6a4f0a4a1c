"""Organisations (spec "Organisations"): every route is session-only (S); roles are checked in svc.orgs."""

from __future__ import annotations

from aiohttp import web

from api.context import services, user_id
from api.routing import RouteTable
from api.schemas import (
    ApprovalList,
    ApprovalReply,
    AuditPage,
    BillingStatus,
    CancelPlanReply,
    CreatedOrgKey,
    InvitationList,
    InvitationReply,
    Joined,
    MemberList,
    MyOrgs,
    Ok,
    OrgAnalytics,
    OrgDetail,
    OrgKeyList,
    OrgReply,
    OrgSecretList,
    RoleChanged,
    SecretSaved,
    TimelinePage,
    UrlReply,
)
from api.timeline import timeline_response
from svc.core import TimelineQuery
from svc.orgs import (
    AnalyticsQuery,
    ApprovalDecisionBody,
    ApprovalRequestBody,
    ApprovalsQuery,
    AuditQuery,
    CreateOrgBody,
    GovernanceBody,
    InvitationBody,
    OrgKeyBody,
    RoleBody,
    SecretBody,
    TransferBody,
    UpdateOrgBody,
)

routes = RouteTable()
ORG = "/api/orgs/{slug}"


def slug(request: web.Request) -> str:
    """The org slug of the path."""
    return request.match_info["slug"]


@routes.post("/api/orgs", auth="S", body=CreateOrgBody, response=OrgReply)
async def create_org(request: web.Request, body: CreateOrgBody) -> web.Response:
    """Create an org; the caller becomes its owner: {org}."""
    org = await services(request).orgs.create(user_id(request), body)
    return web.json_response({"org": org})


@routes.get("/api/orgs/mine", auth="S", response=MyOrgs)
async def my_orgs(request: web.Request) -> web.Response:
    """The caller's orgs with their role: {orgs: [{role, org}]}."""
    return web.json_response({"orgs": await services(request).orgs.mine(user_id(request))})


@routes.get(ORG, auth="S", response=OrgDetail)
async def get_org(request: web.Request) -> web.Response:
    """One org: {org, memberCount, recentTemplates, myRole} (members)."""
    return web.json_response(await services(request).orgs.get(user_id(request), slug(request)))


@routes.patch(ORG, auth="S", body=UpdateOrgBody, response=OrgReply)
async def update_org(request: web.Request, body: UpdateOrgBody) -> web.Response:
    """Change name, billingEmail or avatarUrl (owner, admin): {org}."""
    org = await services(request).orgs.update(user_id(request), slug(request), body)
    return web.json_response({"org": org})


@routes.delete(ORG, auth="S", response=Ok)
async def delete_org(request: web.Request) -> web.Response:
    """Delete the org (owner): templates go back to the owner, keys are revoked."""
    await services(request).orgs.delete(user_id(request), slug(request))
    return web.json_response({"ok": True})


@routes.get(ORG + "/members", auth="S", response=MemberList)
async def list_members(request: web.Request) -> web.Response:
    """The members with their profiles (members)."""
    return web.json_response(
        {"members": await services(request).orgs.members(user_id(request), slug(request))}
    )


@routes.patch(ORG + "/members/{userId}/role", auth="S", body=RoleBody, response=RoleChanged)
async def set_member_role(request: web.Request, body: RoleBody) -> web.Response:
    """Make a member admin or member (owner, admin)."""
    result = await services(request).orgs.set_role(
        user_id(request), slug(request), request.match_info["userId"], body
    )
    return web.json_response(result)


@routes.delete(ORG + "/members/{userId}", auth="S", response=Ok)
async def remove_member(request: web.Request) -> web.Response:
    """Remove a member (owner, admin) or leave (self); never the owner."""
    await services(request).orgs.remove_member(user_id(request), slug(request), request.match_info["userId"])
    return web.json_response({"ok": True})


@routes.patch(ORG + "/transfer", auth="S", body=TransferBody, response=Ok)
async def transfer_org(request: web.Request, body: TransferBody) -> web.Response:
    """Hand ownership to another member (owner); the confirmation must equal the org name."""
    await services(request).orgs.transfer(user_id(request), slug(request), body)
    return web.json_response({"ok": True})


@routes.post(ORG + "/invitations", auth="S", body=InvitationBody, response=InvitationReply)
async def invite(request: web.Request, body: InvitationBody) -> web.Response:
    """Invite an email as admin or member; the link is mailed at once (owner, admin)."""
    invitation = await services(request).org_invitations.invite(user_id(request), slug(request), body)
    return web.json_response({"invitation": invitation})


@routes.get(ORG + "/invitations", auth="S", response=InvitationList)
async def list_invitations(request: web.Request) -> web.Response:
    """Pending invitations that have not expired (owner, admin)."""
    items = await services(request).org_invitations.invitations(user_id(request), slug(request))
    return web.json_response({"invitations": items})


@routes.delete(ORG + "/invitations/{id}", auth="S", response=Ok)
async def cancel_invitation(request: web.Request) -> web.Response:
    """Cancel an invitation (owner, admin)."""
    await services(request).org_invitations.cancel_invitation(
        user_id(request), slug(request), request.match_info["id"]
    )
    return web.json_response({"ok": True})


@routes.post("/api/invitations/{token}/accept", auth="S", response=Joined)
async def accept_invitation(request: web.Request) -> web.Response:
    """Join the org of an invitation sent to the signed-in user's email: {ok, org, role}."""
    return web.json_response(
        await services(request).org_invitations.accept(user_id(request), request.match_info["token"])
    )


@routes.get(ORG + "/keys", auth="S", response=OrgKeyList)
async def list_org_keys(request: web.Request) -> web.Response:
    """The org's keys without values (members)."""
    return web.json_response({"keys": await services(request).org_keys.keys(user_id(request), slug(request))})


@routes.post(ORG + "/keys", auth="S", body=OrgKeyBody, response=CreatedOrgKey)
async def create_org_key(request: web.Request, body: OrgKeyBody) -> web.Response:
    """A new org key, shown once (owner, admin): {id, key, label, createdAt}."""
    created = await services(request).org_keys.create_key(user_id(request), slug(request), body)
    return web.json_response(created)


@routes.delete(ORG + "/keys/{id}", auth="S", status=204)
async def revoke_org_key(request: web.Request) -> web.Response:
    """Revoke an org key at once (owner, admin): 204."""
    await services(request).org_keys.revoke_key(user_id(request), slug(request), request.match_info["id"])
    return web.Response(status=204)


@routes.patch(ORG + "/settings/governance", auth="S", body=GovernanceBody, response=OrgReply)
async def set_governance(request: web.Request, body: GovernanceBody) -> web.Response:
    """Require approval of new deployments, or stop requiring it (owner, admin; Pro): {org}."""
    org = await services(request).org_approvals.set_governance(user_id(request), slug(request), body)
    return web.json_response({"org": org})


@routes.get(ORG + "/approvals", auth="S", query=ApprovalsQuery, response=ApprovalList)
async def list_approvals(request: web.Request, query: ApprovalsQuery) -> web.Response:
    """Approval requests, newest first, optionally of one status (members; Pro)."""
    items = await services(request).org_approvals.approvals(user_id(request), slug(request), query.status)
    return web.json_response({"approvals": items})


@routes.post(ORG + "/approvals", auth="S", body=ApprovalRequestBody, response=ApprovalReply)
async def request_approval(request: web.Request, body: ApprovalRequestBody) -> web.Response:
    """Ask for approval of an org install; owners and admins are emailed (members; Pro)."""
    approval = await services(request).org_approvals.create_approval(user_id(request), slug(request), body)
    return web.json_response({"approval": approval})


@routes.patch(ORG + "/approvals/{id}", auth="S", body=ApprovalDecisionBody, response=ApprovalReply)
async def decide_approval(request: web.Request, body: ApprovalDecisionBody) -> web.Response:
    """Approve or reject a pending request; the requestor is emailed (owner, admin; Pro)."""
    approval = await services(request).org_approvals.decide(
        user_id(request), slug(request), request.match_info["id"], body
    )
    return web.json_response({"approval": approval})


@routes.get(ORG + "/secrets", auth="S", response=OrgSecretList)
async def list_org_secrets(request: web.Request) -> web.Response:
    """Secret names and dates, never values (members; Pro)."""
    return web.json_response(
        {"secrets": await services(request).org_secrets.secrets(user_id(request), slug(request))}
    )


@routes.post(ORG + "/secrets", auth="S", body=SecretBody, response=SecretSaved)
async def set_org_secret(request: web.Request, body: SecretBody) -> web.Response:
    """Create or replace a secret; the key is normalised to UPPER_SNAKE_CASE (owner, admin; Pro)."""
    key = await services(request).org_secrets.set_secret(user_id(request), slug(request), body)
    return web.json_response({"ok": True, "key": key})


@routes.delete(ORG + "/secrets/{key}", auth="S", status=204)
async def delete_org_secret(request: web.Request) -> web.Response:
    """Delete a secret (owner, admin; Pro): 204."""
    await services(request).org_secrets.delete_secret(
        user_id(request), slug(request), request.match_info["key"]
    )
    return web.Response(status=204)


@routes.get(ORG + "/billing/status", auth="S", response=BillingStatus)
async def billing_status(request: web.Request) -> web.Response:
    """The plan and subscription state (members)."""
    return web.json_response(
        await services(request).org_plans.billing_status(user_id(request), slug(request))
    )


@routes.post(ORG + "/billing/checkout", auth="S", response=UrlReply)
async def billing_checkout(request: web.Request) -> web.Response:
    """The payment provider's checkout URL for Pro: 14-day trial, card required (owner, admin)."""
    return web.json_response(await services(request).org_billing.checkout(user_id(request), slug(request)))


@routes.get(ORG + "/billing/portal", auth="S", response=UrlReply)
async def billing_portal(request: web.Request) -> web.Response:
    """The payment provider's billing-portal URL (owner, admin)."""
    return web.json_response(await services(request).org_billing.portal(user_id(request), slug(request)))


@routes.post(ORG + "/billing/cancel", auth="S", response=CancelPlanReply)
async def billing_cancel(request: web.Request) -> web.Response:
    """Cancel Pro at the end of the current period (owner)."""
    return web.json_response(await services(request).org_billing.cancel(user_id(request), slug(request)))


@routes.get(ORG + "/audit-log", auth="S", query=AuditQuery, response=AuditPage)
async def audit_log(request: web.Request, query: AuditQuery) -> web.Response:
    """Audit events, newest first, paged (owner, admin; Pro)."""
    return web.json_response(await services(request).orgs.audit_log(user_id(request), slug(request), query))


@routes.get(ORG + "/audit/timeline", auth="S", query=TimelineQuery, response=TimelinePage)
async def org_timeline(request: web.Request, query: TimelineQuery) -> web.Response:
    """The org's one audit timeline: its events and its installs', newest first, by cursor (Pro)."""
    events, following = await services(request).orgs.timeline(user_id(request), slug(request), query)
    return timeline_response(request, events, following)


@routes.get(ORG + "/analytics", auth="S", query=AnalyticsQuery, response=OrgAnalytics)
async def analytics(request: web.Request, query: AnalyticsQuery) -> web.Response:
    """Runs per day and per template over a window (members; 30 days free, 365 Pro)."""
    return web.json_response(await services(request).orgs.analytics(user_id(request), slug(request), query))
