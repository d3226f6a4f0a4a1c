"""What the money paths (cancel billing, the monthly cycle, builders' earnings) need from the
charge itself, as a protocol: they are handed the `Charges` service without importing it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from svc.billing.payments import PaymentProvider
from svc.core import Document, Mailer, Store
from svc.installs import Installs


@dataclass(frozen=True)
class ChargeOutcome:
    """What a charge request came to."""

    invoice: Document
    charged_now: bool  # False: the period was paid before this call


class ChargeCore(Protocol):
    """The charge of one install's period, and what it is made with (svc.billing.charges)."""

    store: Store
    mailer: Mailer
    installs: Installs

    def require_provider(self) -> PaymentProvider:
        """The provider, or the 503 of every payment endpoint when none is configured."""
        ...

    async def charge(
        self,
        install: Document,
        start: datetime,
        end: datetime,
        amount: int,
        source: str,
        *,
        wait: bool,
        now: datetime | None = None,
    ) -> ChargeOutcome:
        """Claim the period's invoice, charge through the provider, record the outcome."""
        ...

    async def billed_until(self, install: Document) -> datetime:
        """The end of the install's last paid (or settling) period, else its creation."""
        ...
