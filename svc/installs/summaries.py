"""The deployer's home list: managed installs a user deployed or reaches through an org, with
their schedule and what is still missing (variables, secrets)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from svc.core import Document, OrgLookups, RuntimeLookups, Store, Vault, aware, iso
from svc.installs.reach import is_visible
from svc.installs.versions import update_note
from svc.runs import last_runs
from svc.templates import template_heads

MAX_LISTED = 500


async def managed_summaries(
    store: Store,
    vault: Vault,
    managed: list[str],
    user_id: str,
    org_lookups: OrgLookups,
    runtime: RuntimeLookups,
) -> list[dict[str, Any]]:
    """Managed (`svc`) installs the user deployed or reaches through an org, with what is missing."""
    orgs = await org_lookups.member_orgs(user_id)
    org_ids = list(orgs)
    # One query per kind of owner, each only on the fields of the owner index: the embedded
    # server uses an index only when it covers every field of the filter (a platform or
    # status condition beside them made it read every install of every user). Platform
    # and visibility are checked here, over the caller's installs only.
    owners: list[Document] = [{"owner.kind": "user", "owner.id": user_id}]
    if org_ids:
        owners.append({"owner.kind": "org", "owner.id": {"$in": org_ids}})
    found = [doc for owner in owners for doc in await store.installs.find(owner).to_list(None)]
    docs = sorted(
        (d for d in found if d.get("platform") in managed and is_visible(d)),
        key=lambda d: d["createdAt"],
        reverse=True,
    )[:MAX_LISTED]
    org_secrets = await org_lookups.secret_names(org_ids)
    schedules = await runtime.next_runs([d["_id"] for d in docs])
    # The install's newest run, from its all-time run counters (settled runs write no install
    # document); an install's own `lastRunAt` is an earlier release's record of the same.
    ran = await last_runs(store, [d["_id"] for d in docs])
    heads = await template_heads(store, sorted({d["templateId"] for d in docs}))  # issue 34
    summaries = []
    for doc in docs:
        org = orgs.get(doc["owner"]["id"]) if doc["owner"]["kind"] == "org" else None
        definition = doc["definition"]
        required_vars = list(definition.get("requiredVariables") or [])
        have_secrets = set(doc.get("secretsEncrypted") or {}) | (
            org_secrets.get(org["_id"], set()) if org else set()
        )
        token = doc.get("webhookTokenEncrypted")
        summaries.append(
            {
                "id": doc["_id"],
                "name": org["name"] if org else doc["templateName"],
                "pipelineName": doc["templateName"],
                "orgSlug": org["slug"] if org else None,
                "status": doc["status"],
                "platform": doc["platform"],
                "lastRunAt": iso(newest(doc.get("lastRunAt"), ran.get(doc["_id"]))),
                "nextRunAt": iso(schedules.get(doc["_id"])),
                "webhookToken": vault.decrypt(token) if token else None,
                "requiredVariables": required_vars,
                "currentVariables": doc.get("variables") or {},
                "missingSecrets": [
                    s for s in definition.get("requiredSecrets") or [] if s not in have_secrets
                ],
                "missingVariables": [v for v in required_vars if v not in (doc.get("variables") or {})],
                "templateVersion": doc["templateVersion"],
                "updateAvailable": update_note(
                    doc, heads.get(doc["templateId"]), set(doc.get("variables") or {}), have_secrets
                ),
            }
        )
    return summaries


def newest(*moments: datetime | None) -> datetime | None:
    """The latest of the times given (None when none is)."""
    known = [aware(at) for at in moments if at is not None]
    return max(known, default=None)
