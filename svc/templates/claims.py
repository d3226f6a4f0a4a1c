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

from pymongo import ReturnDocument

from svc.core import Document, Store

COUNTER = "activeInstalls"
ACTIVE = {"status": {"$ne": "cancelled"}}
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


async def backfill_install_counts(store: Store) -> int:
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
        active = await store.installs.count_documents({"templateId": doc["_id"], **ACTIVE})
        await templates.update_one(
            {"_id": doc["_id"], COUNTER: {"$exists": False}}, {"$set": {COUNTER: active}}
        )
    return len(missing)
