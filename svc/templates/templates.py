"""Templates: the lifecycle of the spec's state table, versions, rollback, fork, pricing.

A template record is either a `template` (draft, published or archived; its
slug is unique) or a `version_draft` (a pending new version of a published
template; at most one per parent, by a unique index). Every transition is one
conditional update or an insert guarded by a unique index, so concurrent
requests cannot both win.
"""

from __future__ import annotations

import logging
import secrets
from datetime import datetime
from typing import Any

from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError

from svc.core import (
    BadRequest,
    Conflict,
    Document,
    Forbidden,
    InstallLookups,
    Mailer,
    NotFound,
    OrgLookups,
    Store,
    Unprocessable,
    new_id,
    utcnow,
)
from svc.identity import Principal, require_unscoped, user_emails
from svc.templates.claims import (
    COUNTER,
    DRAFT_GUARD,
    DRAFT_GUARD_UNSET,
    clear_stale_draft_slot,
    open_version_draft,
    release_draft_slot,
    require_live_owner,
)
from svc.templates.definitions import check_definition
from svc.templates.eval_gate import PublishGate
from svc.templates.price_changes import (
    next_period_start,
    notify_deployers,
    pricing_answer,
    scheduled_history,
)
from svc.templates.reading import TemplateReading
from svc.templates.resources import (
    MERGED_FIELDS,
    NULLABLE_FIELDS,
    PLATFORM_FEE_PERCENT,
    CreateTemplateBody,
    PricingBody,
    PublishBody,
    RollbackBody,
    UpdateTemplateBody,
    check_pricing,
    is_listed,
    is_owner,
    owner_of,
    view,
)
from svc.templates.versioning import FIRST_SEMVER, classify, next_semver

log = logging.getLogger(__name__)


class Templates(TemplateReading):
    """The template lifecycle (reading it: `TemplateReading`)."""

    def __init__(
        self,
        store: Store,
        mailer: Mailer,
        publish_gate: PublishGate | None = None,
        *,
        installs: InstallLookups,
        orgs: OrgLookups,
    ) -> None:
        self.store = store
        self.mailer = mailer
        # The answers of the packages above (svc/wiring.py hands them in): a template's active
        # installs, and whether an org is live.
        self.installs = installs
        self.orgs = orgs
        # Evals (issue 36): asked before a publish; refuses it (Conflict) when a required suite
        # fails, and answers the scorecard summary the version is published with.
        self.publish_gate = publish_gate

    # ---- ownership -----------------------------------------------------------------

    async def hand_back(self, org_id: str, owner: Document) -> None:
        """An org being deleted gives its templates to `owner` (its owner)."""
        as_org = {"owner.kind": "org", "owner.id": org_id}
        await self._templates.update_many(as_org, {"$set": {"owner": owner, "updatedAt": utcnow()}})

    async def record(self, principal: Principal, template_id: str, own: bool) -> Document:
        """The template's record: one the caller owns (`own`) or may see."""
        return await (self._owned(principal, template_id) if own else self._visible(principal, template_id))

    async def _owned(self, principal: Principal, template_id: str) -> Document:
        """The template, if the caller owns it: 404 when they cannot see it, 403 when they can."""
        require_unscoped(principal)
        doc = await self._templates.find_one({"_id": template_id})
        if doc is None:
            raise NotFound("Template not found")
        if not is_owner(principal, doc):
            if is_listed(doc):
                raise Forbidden("Only the template's owner can change it")
            raise NotFound("Template not found")
        return doc

    # ---- creating and editing ------------------------------------------------------

    async def create(self, principal: Principal, body: CreateTemplateBody) -> dict[str, Any]:
        """A new draft (version 1)."""
        require_unscoped(principal)
        check_definition(body.definition)
        now = utcnow()
        doc = {
            "_id": new_id(),
            "kind": "template",
            "slug": body.slug,
            "name": body.name,
            "description": body.description,
            "ownerTeam": body.ownerTeam,
            "visibility": body.visibility,
            "status": "draft",
            "version": 1,
            "semver": FIRST_SEMVER,
            "publishedAt": None,
            "changeLog": None,
            "definition": body.definition.model_dump(mode="json", exclude_none=True),
            "pricingModel": body.pricingModel,
            "priceUsdCents": body.priceUsdCents,
            "forkable": body.forkable,
            "owner": owner_of(principal),
            COUNTER: 0,
            "createdAt": now,
            "updatedAt": now,
        }
        try:
            await self._templates.insert_one(doc)
        except DuplicateKeyError:
            raise Conflict(f"Slug {body.slug!r} is already taken") from None
        await require_live_owner(self.store, doc, self.orgs)
        return view(doc)

    async def update_draft(
        self, principal: Principal, template_id: str, body: UpdateTemplateBody
    ) -> dict[str, Any]:
        """Edit a draft or a version draft; 409 on a published or archived template."""
        doc = await self._owned(principal, template_id)
        if doc["kind"] == "template" and doc["status"] != "draft":
            raise Conflict(
                f"Template is {doc['status']}; create a version draft (POST /api/templates/{doc['_id']}"
                "/new-version) and edit that"
            )
        sent = body.model_dump(exclude_unset=True, exclude={"definition"})
        # Only the price and the change log may be cleared with null; other nulls mean "unchanged".
        changes: Document = {k: v for k, v in sent.items() if v is not None or k in NULLABLE_FIELDS}
        if body.definition is not None:
            check_definition(body.definition)
            changes["definition"] = body.definition.model_dump(mode="json", exclude_none=True)
        if changes.get("pricingModel") == "free" and "priceUsdCents" not in changes:
            changes["priceUsdCents"] = None  # switching to free clears the price
        try:
            pricing = doc | changes
            check_pricing(pricing["pricingModel"], pricing["priceUsdCents"])
        except ValueError as exc:
            raise BadRequest(f"priceUsdCents: {exc}") from None
        changes["updatedAt"] = utcnow()
        updated = await self._templates.find_one_and_update(
            {"_id": doc["_id"], "status": "draft"}, {"$set": changes}, return_document=ReturnDocument.AFTER
        )
        if updated is None:
            raise Conflict("Template is no longer a draft")
        return view(updated)

    async def set_pricing(self, principal: Principal, body: PricingBody) -> dict[str, Any]:
        """PATCH /api/billing/pricing: a draft's price changes at once; a published template's
        from the next billing period, and its deployers are mailed (svc/templates/price_changes.py)."""
        doc = await self._owned(principal, body.templateId)
        if doc["status"] == "archived":
            raise Conflict("Template is archived")
        now = utcnow()
        changes: Document = {"pricingModel": body.pricingModel, "priceUsdCents": body.priceUsdCents}
        effective = None
        if doc["status"] == "published":
            effective = next_period_start(now)
            changes["priceHistory"] = scheduled_history(doc, body.pricingModel, body.priceUsdCents, effective)
        await self._templates.update_one({"_id": doc["_id"]}, {"$set": {**changes, "updatedAt": now}})
        old = (doc["pricingModel"], doc.get("priceUsdCents"))
        if effective is not None and old != (body.pricingModel, body.priceUsdCents):
            await notify_deployers(self.store, self.mailer, self.installs, {**doc, **changes}, old, effective)
        return {
            "id": doc["_id"],
            "pricingModel": body.pricingModel,
            "priceUsdCents": body.priceUsdCents,
            "envelopeFeePercent": PLATFORM_FEE_PERCENT,
            **pricing_answer(effective),
        }

    # ---- publishing ----------------------------------------------------------------

    async def publish(self, principal: Principal, template_id: str, body: PublishBody) -> dict[str, Any]:
        """Publish a draft, or merge a version draft into its parent."""
        # A version draft's record is deleted once merged (spec): a later publish of its id is a
        # 404 like any unknown id.
        doc = await self._owned(principal, template_id)
        if doc["kind"] == "version_draft":
            card = await self.publish_gate(principal, doc) if self.publish_gate else None
            return await self._publish_version(doc, body.changeLog, card)
        if doc["status"] != "draft":
            raise Conflict(f"Template is already {doc['status']}")
        card = await self.publish_gate(principal, doc) if self.publish_gate else None
        now = utcnow()
        change_log = body.changeLog if body.changeLog is not None else doc.get("changeLog")
        fields = {"status": "published", "publishedAt": now, "changeLog": change_log, "updatedAt": now}
        published = await self._templates.find_one_and_update(
            {"_id": doc["_id"], "status": "draft"},
            {"$set": {**fields, "evalScorecard": card}},
            return_document=ReturnDocument.AFTER,
        )
        if published is None:
            raise Conflict("Template is already published")
        await self._snapshot(published, "MAJOR", now)
        return view(published)

    async def _publish_version(
        self, draft: Document, change_log: str | None, card: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        parent = await self._templates.find_one({"_id": draft["parentTemplateId"]})
        if parent is None or parent["status"] != "published":
            raise Conflict("The parent template is not published")
        bump = classify(parent["definition"], draft["definition"])
        now = utcnow()
        merged: Document = {field: draft.get(field) for field in MERGED_FIELDS}
        if change_log is not None:
            merged["changeLog"] = change_log
        merged.update(
            semver=next_semver(parent.get("semver", FIRST_SEMVER), bump),
            publishedAt=now,
            updatedAt=now,
            evalScorecard=card,
        )
        # A version that changes the price follows the price-change rules (issue 34): from the next
        # billing period, deployers mailed, as PATCH /api/billing/pricing does (docs/billing.md).
        old_price = (parent["pricingModel"], parent.get("priceUsdCents"))
        new_price = (merged["pricingModel"], merged.get("priceUsdCents"))
        if new_price != old_price:
            merged["priceHistory"] = scheduled_history(parent, *new_price, next_period_start(now))
        # The conditional update is the arbiter: of two concurrent publishes, one matches.
        updated = await self._templates.find_one_and_update(
            {"_id": parent["_id"], "status": "published", "version": draft["version"] - 1},
            {"$set": merged, "$inc": {"version": 1}, "$unset": DRAFT_GUARD_UNSET},
            return_document=ReturnDocument.AFTER,
        )
        if updated is None:
            raise await self._publish_lost(draft)
        await self._snapshot(updated, bump, now, from_draft=draft["_id"])
        await self._templates.delete_one({"_id": draft["_id"]})
        if bump == "MAJOR":
            await self._notify_major(updated)
        if new_price != old_price:
            await notify_deployers(
                self.store, self.mailer, self.installs, updated, old_price, next_period_start(now)
            )
        return view(updated)

    async def _publish_lost(self, draft: Document) -> NotFound | Conflict:
        """Why a version draft's merge matched no parent: merged by a concurrent publish (its
        record is gone, or going: 404 as for a publish that came a moment later), or its
        parent left the published state meanwhile (409)."""
        parent = await self._templates.find_one(
            {"_id": draft["parentTemplateId"]}, {"version": 1, "status": 1}
        )
        if parent is not None and parent.get("version", 0) >= draft["version"]:
            return NotFound("Template not found")
        return Conflict("The parent template is not published")

    async def _snapshot(
        self, doc: Document, bump: str, when: datetime, from_draft: str | None = None
    ) -> None:
        snapshot = {
            "fromDraftId": from_draft,
            "_id": f"{doc['_id']}:{doc['version']}",
            "templateId": doc["_id"],
            "version": doc["version"],
            "semver": doc.get("semver", FIRST_SEMVER),
            "bump": bump if doc["version"] > 1 else "INITIAL",
            "changeLog": doc.get("changeLog"),
            "definition": doc["definition"],
            "pricingModel": doc.get("pricingModel"),  # the price the version was published with
            "priceUsdCents": doc.get("priceUsdCents"),
            "publishedAt": when,
            "evalScorecard": doc.get("evalScorecard"),
        }
        await self._versions.replace_one({"_id": snapshot["_id"]}, snapshot, upsert=True)

    async def _notify_major(self, template: Document) -> None:
        """Tell deployers with active installs that a breaking version is out."""
        installs = await self.installs.active_of(template["_id"], limit=10_000)
        user_ids = {i["deployedBy"] for i in installs if i.get("deployedBy")}
        account_email = await user_emails(self.store, user_ids)
        # One address per install: the deploying account's, else the billing email given at install.
        emails = {
            email
            for i in installs
            if (email := account_email.get(i.get("deployedBy")) or i.get("deployerEmail")) is not None
        }
        subject = f"{template['name']} {template['semver']}: a breaking (MAJOR) version is published"
        body = (
            f"Version {template['version']} ({template['semver']}) of {template['name']} "
            f"({template['slug']}) changes its contract: agents or inputs were removed or renamed.\n\n"
            f"Change log:\n{template.get('changeLog') or '(none given)'}\n\n"
            "Your installs keep running the version they were installed from until you upgrade "
            "them: see the plan on each install's Versions tab, or POST /api/installs/:id/upgrade."
        )
        for email in sorted(emails):
            await self.mailer.send(email, subject, body, kind="template.major_version")

    # ---- version drafts, rollback, fork --------------------------------------------

    async def new_version(self, principal: Principal, template_id: str) -> dict[str, Any]:
        """A version draft of a published template, inheriting everything."""
        parent = await self._published_parent(principal, template_id)
        return view(await open_version_draft(self.store, parent, parent["definition"]))

    async def rollback(self, principal: Principal, template_id: str, body: RollbackBody) -> dict[str, Any]:
        """A version draft preloaded with an earlier version's definition."""
        parent = await self._published_parent(principal, template_id)
        snapshot = await self._versions.find_one({"templateId": parent["_id"], "version": body.version})
        if snapshot is None:
            if not await self._templates.count_documents({"_id": parent["_id"]}, limit=1):
                raise NotFound("Template not found")  # deleted since: its snapshots went with it
            raise Unprocessable(f"No snapshot exists for version {body.version}")
        draft = await open_version_draft(self.store, parent, snapshot["definition"])
        return view(draft, parentId=parent["_id"], rolledBackFrom=body.version)

    async def _published_parent(self, principal: Principal, template_id: str) -> Document:
        parent = await self._owned(principal, template_id)
        if parent["kind"] == "version_draft":
            raise Conflict("This is a version draft; create versions from its published parent")
        if parent["status"] != "published":
            raise Conflict(f"Template is {parent['status']}; only a published template gets new versions")
        return parent

    async def fork(self, principal: Principal, template_id: str) -> dict[str, Any]:
        """A private copy (a `team` draft) of a published template."""
        require_unscoped(principal)
        original = await self._templates.find_one({"_id": template_id, "kind": "template"})
        owner = original is not None and is_owner(principal, original)
        if original is None or original["status"] != "published" or not (owner or is_listed(original)):
            raise NotFound("Template not found or not published")
        if not original["forkable"] and not owner:
            raise Forbidden("This template cannot be forked")
        now = utcnow()
        doc = {
            "_id": new_id(),
            "kind": "template",
            "name": original["name"],
            "description": original["description"],
            "ownerTeam": original["ownerTeam"],
            "visibility": "team",
            "status": "draft",
            "version": 1,
            "semver": FIRST_SEMVER,
            "publishedAt": None,
            "changeLog": None,
            "definition": original["definition"],
            "pricingModel": "free",
            "priceUsdCents": None,
            "forkable": True,
            "forkedFromId": original["_id"],
            "owner": owner_of(principal),
            COUNTER: 0,
            "createdAt": now,
            "updatedAt": now,
        }
        for attempt in range(5):
            suffix = "fork" if attempt == 0 else f"fork-{secrets.token_hex(3)}"
            doc["slug"] = f"{original['slug'][: 63 - len(suffix)]}-{suffix}"
            try:
                await self._templates.insert_one(doc)
            except DuplicateKeyError:
                continue
            await require_live_owner(self.store, doc, self.orgs)
            return view(doc)
        raise Conflict("Could not find a free slug for the fork; try again")

    # ---- archive and delete --------------------------------------------------------

    async def archive(self, principal: Principal, template_id: str) -> dict[str, Any]:
        """Delist a published template; existing installs keep running."""
        doc = await self._owned(principal, template_id)
        if doc["kind"] == "version_draft" or doc["status"] == "draft":
            raise Conflict("Only a published template can be archived; delete a draft instead")
        now = utcnow()
        archived = await self._templates.find_one_and_update(
            {"_id": doc["_id"], "status": "published"},
            {"$set": {"status": "archived", "archivedAt": now, "updatedAt": now}},
            return_document=ReturnDocument.AFTER,
        )
        if archived is None:
            raise Conflict("Template is already archived")
        return view(archived, installCount=max(int(archived.get(COUNTER) or 0), 0))

    async def delete(self, principal: Principal, template_id: str) -> None:
        """Remove a draft or version draft at any time; a published or archived template only
        without active installs and without an open version draft.

        One `find_one_and_delete` whose filter is the rule: installs claim a slot on the
        template (`activeInstalls`, svc/templates/claims.py) and a version draft claims the
        parent's draft slot before either exists, so a template with either taken cannot
        match, and a deleted one gives neither (docs/consistency.md).
        """
        doc = await self._owned(principal, template_id)
        removable: Document = {"_id": doc["_id"], "owner": doc["owner"]}
        if doc["kind"] == "template":
            removable["$or"] = [{"status": "draft"}, {COUNTER: {"$lte": 0}, DRAFT_GUARD: None}]
        removed = await self._templates.find_one_and_delete(removable, {"_id": 1})
        if (
            removed is None
            and doc["kind"] == "template"
            and await clear_stale_draft_slot(self.store, doc["_id"])
        ):
            removed = await self._templates.find_one_and_delete(removable, {"_id": 1})
        if removed is None:
            now = await self._templates.find_one(
                {"_id": doc["_id"]}, {COUNTER: 1, DRAFT_GUARD: 1, "owner": 1}
            )
            if now is None or now.get("owner") != doc["owner"]:
                raise NotFound("Template not found")
            active = int(now.get(COUNTER) or 0)
            if active > 0:
                raise Conflict(
                    f"Template has {active} active install(s); archive it instead", canArchive=True
                )
            raise Conflict(
                "Template has an open version draft; publish or delete it "
                f"(DELETE /api/templates/{now.get(DRAFT_GUARD)}) first"
            )
        if doc["kind"] == "version_draft":
            await release_draft_slot(self.store, doc["parentTemplateId"], doc["_id"])
            return
        # Leftovers of an interrupted publish (the slot was emptied by the publish itself).
        await self._templates.delete_many({"kind": "version_draft", "parentTemplateId": doc["_id"]})
        await self._versions.delete_many({"templateId": doc["_id"]})
