"""Who may reach an install: the one rule every route and job asks.

- A credential bound to one install (a scoped key, an install token, a webhook token,
  an app key) reaches that install and no other.
- Otherwise the install's owner reaches it: the user, or the org for an org key.
- A signed-in member of the owning org reaches the org's installs while still a member (the
  orgs' own answer, `svc.orgs.is_member`, handed in as `svc.core.OrgLookups`);
  a member's personal key stays personal (docs/orgs.md).
- Nobody reaches an install while it is being provisioned (a governance-pending one is
  provisioned, so it is visible).
"""

from __future__ import annotations

from svc.core import Document, OrgLookups, Store
from svc.identity import Principal
from svc.templates import find_template, is_owner, owned_by, owner_of

BOUND_TO_INSTALL = ("install_token", "webhook_token", "app_key")
# An owner's list reads this many installs beyond its limit: room for ones still provisioning.
PROVISIONING = 50


def is_visible(doc: Document) -> bool:
    """False while provisioning (a governance-pending install is visible): status `pending`
    means provisioning, except on an install waiting for governance approval (`approval:
    "pending"`, provisioned and listed, but not ready for runs until approved)."""
    return doc.get("status") != "pending" or doc.get("approval") == "pending"


def visible(docs: list[Document], limit: int) -> list[Document]:
    """The first `limit` of `docs` that are not being provisioned (`owned_query`'s answer)."""
    return [doc for doc in docs if is_visible(doc)][:limit]


async def reaches(orgs: OrgLookups, principal: Principal, doc: Document | None) -> bool:
    """May this principal see and change this install?"""
    if doc is None or not is_visible(doc):
        return False
    if principal.install_id is not None and principal.install_id != doc["_id"]:
        return False
    if principal.via in BOUND_TO_INSTALL:
        return principal.install_id == doc["_id"]
    if doc.get("owner") == owner_of(principal):
        return True
    owner = doc.get("owner") or {}
    if principal.via != "session" or principal.user_id is None or owner.get("kind") != "org":
        return False
    return await orgs.is_member(owner["id"], principal.user_id)


def owned_query(principal: Principal) -> Document:
    """The filter of the installs the principal owns (its own install only, for a scoped key),
    visible or not: `is_visible` applies after the read. A filter with the visibility rule (a
    top-level `$or`) would read every install of every owner on the embedded server instead of
    riding the owner's index."""
    query: Document = dict(owned_by(principal))
    if principal.install_id is not None:
        query["_id"] = principal.install_id
    return query


async def deployer_reaches(orgs: OrgLookups, user_id: str, doc: Document | None) -> bool:
    """May this user act as the install's deployer (cancel billing)? The user who deployed it or
    owns it; for an org's install, only while still a member of the org."""
    if doc is None or not is_visible(doc):
        return False
    owner = doc.get("owner") or {}
    if doc.get("deployedBy") != user_id and owner != {"kind": "user", "id": user_id}:
        return False
    return owner.get("kind") != "org" or await orgs.is_member(owner["id"], user_id)


async def builder_reaches(store: Store, principal: Principal, doc: Document | None) -> bool:
    """Does this principal act as the builder of the install's template? The builder may read the
    install's runs without their content (docs/runs.md); a credential bound to one install never
    does (it is the deployer's)."""
    if doc is None or not is_visible(doc) or principal.via in BOUND_TO_INSTALL:
        return False
    if principal.install_id is not None and principal.install_id != doc["_id"]:
        return False
    template = await find_template(store, doc["templateId"], "owner")
    return template is not None and is_owner(principal, template)
