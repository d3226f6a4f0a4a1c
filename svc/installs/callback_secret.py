"""The per-install callback signing secret.

Callbacks of webhook runs were signed with the webhook token, which is also the
credential that starts (billed) runs: whoever verified callbacks could trigger runs.
The signing secret is now its own value, made on request, shown once in that
answer, stored encrypted, and replaced by the next request (rotation).
"""

from __future__ import annotations

import secrets

from svc.core import Document, Store, Vault, iso, utcnow

PREFIX = "svc_cbs_"


async def rotate_callback_secret(store: Store, vault: Vault, install: Document) -> dict[str, str]:
    """Make a new signing secret for the install (the old one stops signing at once)."""
    raw = PREFIX + secrets.token_urlsafe(32)
    now = utcnow()
    await store.installs.update_one(
        {"_id": install["_id"]},
        {"$set": {"callbackSecretEncrypted": vault.encrypt(raw), "callbackSecretRotatedAt": now}},
    )
    return {"installId": install["_id"], "callbackSecret": raw, "rotatedAt": iso(now)}
