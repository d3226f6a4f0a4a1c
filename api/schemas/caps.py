"""Responses of spend limits and callback redelivery (issue #18: durable callbacks, spend caps)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from api.schemas.common import Reply, Timestamp
from api.schemas.run_watch import CallbackAttempt


class InstallLimits(Reply):
    """PATCH /api/installs/:installId/limits: the limits in force and this period's spend."""

    installId: str
    monthlyCapCents: int | None = Field(description="null: no monthly cap")
    runTokenCap: int | None = Field(description="null: no per-run token cap")
    spentCents: int = Field(description="this billing period's usage cost of the install")
    periodStart: Timestamp
    periodResetsAt: Timestamp


class CallbackDeliveryReply(Reply):
    """POST /api/installs/:installId/runs/:runId/callback/redeliver: the delivery record."""

    runId: str
    installId: str
    url: str
    status: Literal["pending", "delivered", "failed"]
    attempts: list[CallbackAttempt]
    nextAttemptAt: Timestamp | None
    createdAt: Timestamp | None
