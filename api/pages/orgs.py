"""Organisation pages: members and roles, invitations (and the mailed accept link), approvals
(the mailed link), org secrets (names only), the audit log, analytics, plan and billing (and the
payment provider's return page).

Each page asks `Orgs` with the viewer's user id and the org's slug, the same calls
as `/api/orgs/*`, so roles and the Pro plan gate pages exactly as they gate the API.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from api.context import services
from api.errors import status_of
from api.pages.base import PageTable, Viewer, done, form, parse, render
from api.pages.charts import bar_chart, rate_chart
from svc.core import ServiceError
from svc.orgs import (
    AnalyticsQuery,
    ApprovalDecisionBody,
    AuditQuery,
    CreateOrgBody,
    GovernanceBody,
    InvitationBody,
    OrgKeyBody,
    RoleBody,
    SecretBody,
)

routes = PageTable()
ADMIN_ROLES = ("owner", "admin")


def slug_of(request: web.Request) -> str:
    """The org slug of the path."""
    return request.match_info["slug"]


async def org_context(request: web.Request, viewer: Viewer, tab: str) -> dict[str, Any]:
    """The org (404 to a non-member, like the API), the viewer's role, its plan, the active tab."""
    overview = await services(request).orgs.get(viewer.user_id, slug_of(request))
    return {
        "org": overview["org"],
        "overview": overview,
        "role": overview["myRole"],
        "is_admin": overview["myRole"] in ADMIN_ROLES,
        "tab": tab,
    }


async def attempt(call: Any) -> tuple[Any, str | None]:
    """A section that may be refused (Pro only, admins only): its data, or why not."""
    try:
        return await call, None
    except ServiceError as exc:
        return None, exc.message


@routes.get("/orgs")
async def my_orgs(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """The orgs I belong to, and a form to start one."""
    return render(request, "orgs.html", viewer, orgs=await services(request).orgs.mine(viewer.user_id))


@routes.post("/orgs")
async def create_org(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Start an org (I become its owner)."""
    body = parse(CreateOrgBody, await form(request))
    org = await services(request).orgs.create(viewer.user_id, body)
    return done(request, f"/orgs/{org['slug']}", slug=org["slug"])


@routes.get("/orgs/{slug}")
async def org_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Members and roles, pending invitations, the invite form, org keys."""
    return await render_org_page(request, viewer, created_key=None)


async def render_org_page(
    request: web.Request, viewer: Viewer, created_key: dict[str, Any] | None
) -> web.Response:
    """The members page, with a just-created org key shown once when there is one."""
    svc = services(request)
    context = await org_context(request, viewer, "members")
    members = await svc.orgs.members(viewer.user_id, slug_of(request))
    invitations: list[dict[str, Any]] = []
    if context["is_admin"]:
        invitations = await svc.org_invitations.invitations(viewer.user_id, slug_of(request))
    keys = await svc.org_keys.keys(viewer.user_id, slug_of(request))
    response = render(
        request,
        "org.html",
        viewer,
        members=members,
        invitations=invitations,
        keys=keys,
        created_key=created_key,
        **context,
    )
    if created_key is not None:
        response.headers["Cache-Control"] = "no-store"
    return response


@routes.post("/orgs/{slug}/keys")
async def create_org_key(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Create an org key and show its value this once."""
    body = parse(OrgKeyBody, {"label": (await form(request)).get("label") or None})
    created = await services(request).org_keys.create_key(viewer.user_id, slug_of(request), body)
    return await render_org_page(request, viewer, created_key=created)


@routes.post("/orgs/{slug}/keys/{id}/revoke")
async def revoke_org_key(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Revoke an org key at once."""
    await services(request).org_keys.revoke_key(viewer.user_id, slug_of(request), request.match_info["id"])
    return done(request, f"/orgs/{slug_of(request)}#keys")


@routes.post("/orgs/{slug}/invitations")
async def invite(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Invite someone by email (the mail carries the accept link)."""
    body = parse(InvitationBody, await form(request))
    await services(request).org_invitations.invite(viewer.user_id, slug_of(request), body)
    return done(request, f"/orgs/{slug_of(request)}")


@routes.post("/orgs/{slug}/invitations/{id}/cancel")
async def cancel_invitation(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Cancel a pending invitation."""
    await services(request).org_invitations.cancel_invitation(
        viewer.user_id, slug_of(request), request.match_info["id"]
    )
    return done(request, f"/orgs/{slug_of(request)}")


@routes.post("/orgs/{slug}/members/{userId}/role")
async def set_role(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Make a member an admin or a plain member."""
    body = parse(RoleBody, await form(request))
    await services(request).orgs.set_role(
        viewer.user_id, slug_of(request), request.match_info["userId"], body
    )
    return done(request, f"/orgs/{slug_of(request)}")


@routes.post("/orgs/{slug}/members/{userId}/remove")
async def remove_member(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Remove a member (or leave, for oneself)."""
    target = request.match_info["userId"]
    await services(request).orgs.remove_member(viewer.user_id, slug_of(request), target)
    return done(request, "/orgs" if target == viewer.user_id else f"/orgs/{slug_of(request)}")


@routes.get("/invitations/{token}")
async def invitation_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """The page the invitation mail links to: accept as the signed-in person."""
    return render(request, "invitation.html", viewer, token=request.match_info["token"], error=None)


@routes.post("/invitations/{token}")
async def accept_invitation(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Join the org with the invited role (404 unknown, 410 expired, 403 another address)."""
    try:
        joined = await services(request).org_invitations.accept(viewer.user_id, request.match_info["token"])
    except ServiceError as exc:
        return render(
            request,
            "invitation.html",
            viewer,
            status=status_of(exc),
            token=request.match_info["token"],
            error=exc.message,
        )
    return done(request, f"/orgs/{joined['org']['slug']}")


@routes.get("/orgs/{slug}/approvals")
async def approvals_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """The deployment approvals queue (the link in the approval mail)."""
    context = await org_context(request, viewer, "approvals")
    status = request.query.get("status", "pending")
    items, refused = await attempt(
        services(request).org_approvals.approvals(viewer.user_id, slug_of(request), status or None)
    )
    return render(
        request, "approvals.html", viewer, approvals=items or [], refused=refused, state=status, **context
    )


@routes.post("/orgs/{slug}/approvals/{id}")
async def decide(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Approve or reject a deployment request, with an optional note."""
    data = await form(request)
    body = parse(ApprovalDecisionBody, {"status": data.get("status"), "note": data.get("note") or None})
    await services(request).org_approvals.decide(
        viewer.user_id, slug_of(request), request.match_info["id"], body
    )
    return done(request, f"/orgs/{slug_of(request)}/approvals")


@routes.get("/orgs/{slug}/secrets")
async def secrets_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Org secrets by name, with when each was set; values are never shown."""
    context = await org_context(request, viewer, "secrets")
    items, refused = await attempt(services(request).org_secrets.secrets(viewer.user_id, slug_of(request)))
    return render(request, "org_secrets.html", viewer, secrets=items or [], refused=refused, **context)


@routes.post("/orgs/{slug}/secrets")
async def set_secret(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Set or replace an org secret."""
    body = parse(SecretBody, await form(request))
    await services(request).org_secrets.set_secret(viewer.user_id, slug_of(request), body)
    return done(request, f"/orgs/{slug_of(request)}/secrets")


@routes.post("/orgs/{slug}/secrets/{key}/delete")
async def delete_secret(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Delete an org secret."""
    await services(request).org_secrets.delete_secret(
        viewer.user_id, slug_of(request), request.match_info["key"]
    )
    return done(request, f"/orgs/{slug_of(request)}/secrets")


@routes.get("/orgs/{slug}/audit")
async def audit_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """The audit log, newest first, filtered by period (and action, within the page)."""
    context = await org_context(request, viewer, "audit")
    query = parse(
        AuditQuery,
        {
            k: v
            for k, v in {
                "page": request.query.get("page") or 1,
                "from": request.query.get("from") or None,
                "to": request.query.get("to") or None,
            }.items()
            if v is not None
        },
    )
    result, refused = await attempt(services(request).orgs.audit_log(viewer.user_id, slug_of(request), query))
    action = request.query.get("action", "")
    events = [
        e for e in (result or {}).get("events", []) if not action or e.get("action", "").startswith(action)
    ]
    filters = {"from": request.query.get("from", ""), "to": request.query.get("to", ""), "action": action}
    return render(
        request,
        "audit.html",
        viewer,
        events=events,
        refused=refused,
        filters=filters,
        page=query.page,
        **context,
    )


@routes.get("/orgs/{slug}/analytics")
async def analytics_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Runs per day, success rate, runs by template, over the org's period."""
    context = await org_context(request, viewer, "analytics")
    query = parse(AnalyticsQuery, {})
    report = await services(request).orgs.analytics(viewer.user_id, slug_of(request), query)
    charts = [
        bar_chart(
            "Runs per day",
            [(d["date"][5:], d["total"]) for d in report["byDay"]],
            failures=[float(d["total"] - d["success"]) for d in report["byDay"]],
        ),
        rate_chart(
            "Success rate per day", [(d["date"][5:], d["total"], d["success"]) for d in report["byDay"]]
        ),
        bar_chart(
            "Runs by template", [(t["name"] or t["templateId"], t["total"]) for t in report["byTemplate"]]
        ),
    ]
    return render(request, "org_analytics.html", viewer, report=report, charts=charts, **context)


@routes.get("/orgs/{slug}/billing")
async def billing_page(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Plan and billing; also where the payment provider sends people back to."""
    context = await org_context(request, viewer, "billing")
    status = await services(request).org_plans.billing_status(viewer.user_id, slug_of(request))
    returned = "session_id" in request.query or request.query.get("return") is not None
    return render(request, "billing.html", viewer, billing=status, returned=returned, **context)


@routes.post("/orgs/{slug}/governance")
async def set_governance(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Turn approval of new deployments on or off (Pro; owners and admins)."""
    data = await form(request)
    body = parse(GovernanceBody, {"enabled": data.get("enabled") == "true"})
    await services(request).org_approvals.set_governance(viewer.user_id, slug_of(request), body)
    return done(request, f"/orgs/{slug_of(request)}/approvals")


@routes.post("/orgs/{slug}/billing/portal")
async def portal(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Open the payment provider's customer portal."""
    result = await services(request).org_billing.portal(viewer.user_id, slug_of(request))
    raise web.HTTPSeeOther(str(result["url"]))


@routes.post("/orgs/{slug}/billing/checkout")
async def checkout(request: web.Request, viewer: Viewer) -> web.StreamResponse:
    """Start the Pro checkout at the payment provider (14-day trial)."""
    result = await services(request).org_billing.checkout(viewer.user_id, slug_of(request))
    raise web.HTTPSeeOther(str(result["url"]))
