"""`svc keys rotate`: every stored secret re-encrypted under the newest key of SVC_SECRET_KEYS.

It joins the packages that store secrets (each declares its Fernet fields as `ENCRYPTED`,
beside the code that writes them) and walks them with core's `Rekeying` (svc/core/rekey.py:
bounded batches, a checkpoint to resume from, audited). A lease keeps a second run from
walking at the same time. docs/settings.md, "Rotating the Fernet key", is the procedure.
"""

from __future__ import annotations

import uuid

from svc import identity, installs, orgs
from svc.core import (
    REKEY_BATCH,
    BadRequest,
    Conflict,
    Document,
    Encrypted,
    Lease,
    Rekeying,
    RekeyProgress,
    Store,
    Vault,
    rekey_summary,
)

FIELDS: tuple[Encrypted, ...] = (*identity.ENCRYPTED, *installs.ENCRYPTED, *orgs.ENCRYPTED)
LEASE = "keys-rotate"
LEASE_TTL_S = 30.0
ONE_KEY = (
    "nothing to rotate to: SVC_SECRET_KEYS holds {count}; put the new key first and keep the old "
    "ones after it (SVC_SECRET_KEYS=<new>,<old>), restart every process with it, then run this again"
)


async def rotate_keys(
    store: Store, vault: Vault, batch: int = REKEY_BATCH, progress: RekeyProgress | None = None
) -> Document:
    """Re-encrypt every declared field under the vault's first key; the pass's report."""
    if len(vault.keys) < 2:
        raise BadRequest(ONE_KEY.format(count="one key" if vault.keys else "no key"))
    lease = Lease(store, LEASE, uuid.uuid4().hex, LEASE_TTL_S)
    if not await lease.hold():
        raise Conflict("another svc keys rotate is running (or was stopped under 30 s ago); try again")

    async def renewed(step: Document) -> None:
        await lease.hold()
        if progress is not None:
            reported = progress(step)
            if reported is not None:
                await reported

    try:
        return rekey_summary(await Rekeying(store, vault, FIELDS, batch).run(renewed))
    finally:
        await lease.release()
