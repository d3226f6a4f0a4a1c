"""Claims on a template record that other packages make, so rules spanning records are atomic.

The rule "a template is deleted only with zero active installs; installs are created only
on a published template" spans two collections. It is kept by a counter on the template,
`activeInstalls`, that only these functions change:

- the installs package claims a slot (`claim_install`) *before* it writes an install: one
  conditional update whose filter is the rule (`status: published`), so an archived, draft
  or deleted template can never gain one;
- it gives the slot back (`release_install`) when the install is cancelled or its creation
  is abandoned, exactly once per install (the install's own conditional status change
  decides which caller does it);
- `Templates.delete` removes a published or archived template with one
  `find_one_and_delete` whose filter says `activeInstalls <= 0`.

Each step is a single-document atomic operation, so no interleaving lets both an install
creation and a delete succeed. docs/consistency.md lists every such rule.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError

from svc.core import Conflict, Document, InstallLookups, NotFound, OrgLookups, Store, aware, new_id, utcnow
from svc.templates.resources import MERGED_FIELDS
from svc.templates.versioning import FIRST_SEMVER

COUNTER = "activeInstalls"
# A published template's open version draft: its id, set on the parent before the draft is
# written, emptied when the draft is published or deleted (svc/templates/templates.py).
DRAFT_GUARD = "versionDraftId"
DRAFT_GUARD_AT = "versionDraftAt"
DRAFT_GUARD_UNSET = {DRAFT_GUARD: "", DRAFT_GUARD_AT: ""}
DRAFT_CLAIM_LEASE = timedelta(minutes=2)


async def claim_install(store: Store, template_id: str) -> Document | None:
    """Count one more active install on a published template; the template, or None when it
    is not (or no longer) published."""
    return await store["templates"].find_one_and_update(
        {"_id": template_id, "kind": "template", "status": "published"},
        {"$inc": {COUNTER: 1}},
        return_document=ReturnDocument.AFTER,
    )


async def release_install(store: Store, template_id: str) -> None:
    """Count one active install fewer (a cancellation, or a creation that did not finish)."""
    await store["templates"].update_one(
        {"_id": template_id, "kind": "template", COUNTER: {"$gt": 0}}, {"$inc": {COUNTER: -1}}
    )


async def backfill_install_counts(store: Store, installs: InstallLookups) -> int:
    """Give templates stored before the counter and the draft guard existed their values;
    how many counters were set.

    Runs at start-up, before the API takes requests. A template created since carries the
    counter from its first write, so this touches only records written by older versions.
    """
    drafts = (
        await store["templates"]
        .find({"kind": "version_draft"}, {"parentTemplateId": 1, "createdAt": 1})
        .to_list(None)
    )
    for draft in drafts:
        await store["templates"].update_one(
            {"_id": draft["parentTemplateId"], DRAFT_GUARD: None},
            {"$set": {DRAFT_GUARD: draft["_id"], DRAFT_GUARD_AT: draft["createdAt"]}},
        )
    templates = store["templates"]
    missing = await templates.find({"kind": "template", COUNTER: {"$exists": False}}, {"_id": 1}).to_list(
        None
    )
    for doc in missing:
        active = await installs.count_active(doc["_id"])
        await templates.update_one(
            {"_id": doc["_id"], COUNTER: {"$exists": False}}, {"$set": {COUNTER: active}}
        )
    return len(missing)


async def release_draft_slot(store: Store, parent_id: str, draft_id: str) -> None:
    """Empty the parent's draft slot if this draft holds it."""
    await store["templates"].update_one(
        {"_id": parent_id, DRAFT_GUARD: draft_id}, {"$unset": DRAFT_GUARD_UNSET}
    )


async def clear_stale_draft_slot(store: Store, parent_id: str) -> bool:
    """Empty a slot whose draft never got written (a process stopped between the claim and the
    insert): claimed longer than a lease ago and no such draft. True when cleared."""
    templates = store["templates"]
    parent = await templates.find_one({"_id": parent_id}, {DRAFT_GUARD: 1, DRAFT_GUARD_AT: 1}) or {}
    guard, claimed_at = parent.get(DRAFT_GUARD), parent.get(DRAFT_GUARD_AT)
    if guard is None or (claimed_at is not None and aware(claimed_at) > utcnow() - DRAFT_CLAIM_LEASE):
        return False
    if await templates.count_documents({"_id": guard}, limit=1):
        return False
    cleared = await templates.update_one(
        {"_id": parent_id, DRAFT_GUARD: guard}, {"$unset": DRAFT_GUARD_UNSET}
    )
    return cleared.modified_count == 1


async def require_live_owner(store: Store, doc: Document, orgs: OrgLookups) -> None:
    """An org's new template, written after the org began deleting itself, is taken back (404).

    Org deletion sets the org's `deleting` guard before it hands templates back; this check
    runs after our insert. Either the hand-back sees our template (and gives it to the owner,
    as if we had come first), or we see the guard and remove it.
    """
    owner = doc["owner"]
    if owner["kind"] != "org":
        return
    if not await orgs.is_live(owner["id"]):
        await store["templates"].delete_one({"_id": doc["_id"]})
        raise NotFound("Org not found")


async def open_version_draft(store: Store, parent: Document, definition: dict[str, Any]) -> Document:
    """Claim the parent's draft slot (its `versionDraftId` guard), then write the draft.

    The claim is one conditional update of the parent (published, at the version read,
    no draft): of concurrent new-version and rollback calls one wins, and a delete, which
    needs the slot empty, cannot interleave (docs/consistency.md).
    """
    draft_id = new_id()
    now = utcnow()
    claim = {"_id": parent["_id"], "status": "published", "version": parent["version"], DRAFT_GUARD: None}
    taking = {"$set": {DRAFT_GUARD: draft_id, DRAFT_GUARD_AT: now}}
    claimed = await store["templates"].update_one(claim, taking)
    if not claimed.matched_count and await clear_stale_draft_slot(store, parent["_id"]):
        claimed = await store["templates"].update_one(claim, taking)
    if not claimed.matched_count:
        current = await store["templates"].find_one({"_id": parent["_id"]}, {"status": 1, "version": 1})
        if current is None:
            raise NotFound("Template not found")
        if current["status"] != "published":
            raise Conflict(f"Template is {current['status']}; only a published template gets new versions")
        if current["version"] != parent["version"]:
            raise Conflict("The template changed while the draft was being opened; try again")
        raise Conflict("An active version draft already exists for this template")
    # A draft at or below the parent's version is left over from an interrupted publish.
    stale = {"$lte": parent["version"]}
    await store["templates"].delete_many(
        {"kind": "version_draft", "parentTemplateId": parent["_id"], "version": stale}
    )
    draft = {
        **{field: parent.get(field) for field in MERGED_FIELDS},
        "_id": draft_id,
        "kind": "version_draft",
        "slug": parent["slug"],
        "status": "draft",
        "version": parent["version"] + 1,
        "semver": parent.get("semver", FIRST_SEMVER),
        "parentTemplateId": parent["_id"],
        "definition": definition,
        "changeLog": None,
        "publishedAt": None,
        "owner": parent["owner"],
        "createdAt": now,
        "updatedAt": now,
    }
    try:
        await store["templates"].insert_one(draft)
    except DuplicateKeyError:
        await release_draft_slot(store, parent["_id"], draft_id)
        raise Conflict("An active version draft already exists for this template") from None
    return draft
