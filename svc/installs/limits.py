"""A deployer's spend limits on an install: a monthly cap in cents and a per-run token cap.

Kept on the install document (`limits`), so the run's actor reads the token cap with the
install it loads anyway and admission reads the monthly cap with no extra round trip. The
billing package decides what "spent" means and refuses runs past the cap (svc/billing/spend_caps.py);
the runtime stops a run at its token cap (svc/runtime/agent_loop.py). docs/billing.md.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from svc.core import Document, RequestBody, Store, utcnow

# Above these a value is a mistake, not a limit (400): a million dollars a month, 100M tokens a run.
MAX_MONTHLY_CAP_CENTS = 100_000_000
MAX_RUN_TOKEN_CAP = 100_000_000
FIELDS = ("monthlyCapCents", "runTokenCap")


class LimitsBody(RequestBody):
    """PATCH /api/installs/:installId/limits: a field left out is unchanged, null clears it."""

    monthlyCapCents: int | None = Field(default=None, ge=0, le=MAX_MONTHLY_CAP_CENTS)
    runTokenCap: int | None = Field(default=None, ge=1, le=MAX_RUN_TOKEN_CAP)

    @model_validator(mode="after")
    def _something(self) -> LimitsBody:
        if not self.model_fields_set & set(FIELDS):
            raise ValueError("give monthlyCapCents and/or runTokenCap (null clears one)")
        return self


def limits_of(install: Document) -> dict[str, int | None]:
    """The install's limits, each null when not set."""
    stored = install.get("limits") or {}
    return {name: stored.get(name) for name in FIELDS}


async def set_limits(store: Store, install: Document, body: LimitsBody) -> dict[str, Any]:
    """Set or clear the install's limits; the limits now in force."""
    changes: Document = {}
    cleared: Document = {}
    for name in FIELDS:
        if name not in body.model_fields_set:
            continue
        value = getattr(body, name)
        if value is None:
            cleared[f"limits.{name}"] = ""
        else:
            changes[f"limits.{name}"] = value
    update: Document = {"$set": {**changes, "limitsUpdatedAt": utcnow()}}
    if cleared:
        update["$unset"] = cleared
    updated = await store.installs.find_one_and_update(
        {"_id": install["_id"]}, update, projection={"limits": 1}, return_document=True
    )
    return limits_of(updated or {})
