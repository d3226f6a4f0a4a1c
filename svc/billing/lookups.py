"""What other packages read of billing: it owns `pay_customers`; installs (below it) is handed
`PaymentReads` by the composition root (svc/wiring.py) as its `svc.core.PaymentLookups`."""

from __future__ import annotations

from svc.core import Store


async def customer_email(store: Store, customer_id: str) -> str | None:
    """The email a payment customer was created for (None: no such customer)."""
    customer = await store["pay_customers"].find_one({"_id": customer_id}, {"email": 1})
    return customer["email"] if customer is not None else None


class PaymentReads:
    """Billing's answers for the packages below it (svc.core.PaymentLookups)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def customer_email(self, customer_id: str) -> str | None:
        return await customer_email(self.store, customer_id)
