"""The builder's side of the money: held shares paid out, transfer outcomes, earnings.

A builder's share of a charge is routed to their payout account when it is active, else
held on the platform balance (`payout: "held"`) and transferred later: one provider
transfer per invoice, claimed held → transferring → routed. A transfer the provider
declines is final (`declined`) until the builder's next `account.updated` event requeues
it with a new key; a reversed transfer is recorded and never sent again (docs/billing.md).
Reading a payout status never moves money.
"""

from __future__ import annotations

import logging
from typing import Any

from svc.billing.claim_timeouts import BATCH, CLAIM_LEASE, KEY_LIFETIME
from svc.billing.payments import PaymentDeclined, ProviderError, ProviderRefused
from svc.billing.period_charge import Charger
from svc.core import Document, iso, utcnow
from svc.identity import active_payout_accounts
from svc.templates import find_templates

log = logging.getLogger("svc.billing.charges")


class Earnings:
    """Held builder shares, their transfers, and `GET /api/stripe/my-earnings`."""

    def __init__(self, charger: Charger) -> None:
        self.charger = charger
        self.store = charger.store

    @property
    def _invoices(self) -> Any:
        return self.store["invoices"]

    async def pay_out_held(self, builder_user_id: str | None = None) -> int:
        """Transfer builder shares held while a payout account was not active; how many moved.

        One transfer per invoice with the key `svc-payout:<invoiceId>` (`:<n>` after its
        n-th requeue), claimed by a conditional update (held → transferring → routed).
        An unknown outcome stays `transferring` and is retried with the same key after the
        lease, within the provider's 24-hour key lifetime; older ones are left for an
        operator. A declined transfer is final (`declined`): the same key would only replay
        the refusal, so nothing retries it until `requeue_declined` (the builder's next
        account event) gives it a new key. A rate-limited one goes back to `held`.
        """
        provider = self.charger.require_provider()
        now = utcnow()
        due: Document = {
            "status": "paid",
            "builderAmountCents": {"$gt": 0},
            "$or": [
                {"payout": "held"},
                {
                    "payout": "transferring",
                    "transferClaimedAt": {"$lt": now - CLAIM_LEASE},
                    "transferStartedAt": {"$gt": now - KEY_LIFETIME},
                },
            ],
        }
        builders = (
            [builder_user_id] if builder_user_id else await self._invoices.distinct("builderUserId", due)
        )
        active = await active_payout_accounts(self.store, builders)
        moved = 0
        for user_id, account_id in active.items():
            async for invoice in self._invoices.find({**due, "builderUserId": user_id}).limit(BATCH):
                claimed = await self._invoices.find_one_and_update(
                    {
                        "_id": invoice["_id"],
                        "payout": invoice["payout"],
                        "transferClaimedAt": invoice.get("transferClaimedAt"),
                    },
                    {
                        "$set": {
                            "payout": "transferring",
                            "transferClaimedAt": now,
                            "transferStartedAt": invoice.get("transferStartedAt") or now,
                        }
                    },
                )
                if claimed is None:
                    continue
                requeues = int(invoice.get("transferRequeues") or 0)
                key = f"svc-payout:{invoice['_id']}" + (f":{requeues}" if requeues else "")
                try:
                    transfer_id = await provider.transfer(
                        amount_cents=invoice["builderAmountCents"],
                        destination=account_id,
                        idempotency_key=key,
                        metadata={"invoiceId": invoice["_id"]},
                    )
                except (PaymentDeclined, ProviderRefused) as exc:
                    busy = isinstance(exc, ProviderRefused) and exc.busy
                    log.warning(
                        "held payout transfer refused",
                        extra={"invoiceId": invoice["_id"], "final": not busy},
                    )
                    await self._invoices.update_one(
                        {"_id": invoice["_id"], "payout": "transferring", "transferClaimedAt": now},
                        {"$set": {"payout": "held"}}
                        if busy
                        else {
                            "$set": {
                                "payout": "declined",
                                "payoutFailure": str(
                                    exc.message if isinstance(exc, PaymentDeclined) else exc
                                ),
                                "payoutDeclinedAt": utcnow(),
                            }
                        },
                    )
                    continue
                except ProviderError:
                    log.warning("held payout transfer failed", extra={"invoiceId": invoice["_id"]})
                    continue  # stays `transferring`: retried with the same key after the lease
                await self._invoices.update_one(
                    {"_id": invoice["_id"]},
                    {"$set": {"payout": "routed", "transferId": transfer_id, "payoutAccountId": account_id}},
                )
                moved += 1
        return moved

    async def requeue_declined(self, builder_user_id: str) -> int:
        """Declined transfers of this builder go back to `held` with a new key (the next
        account event says the account may take them now); how many."""
        result = await self._invoices.update_many(
            {"builderUserId": builder_user_id, "payout": "declined"},
            {
                "$set": {"payout": "held", "updatedAt": utcnow()},
                "$inc": {"transferRequeues": 1},
                "$unset": {"transferClaimedAt": "", "transferStartedAt": ""},
            },
        )
        return int(result.modified_count)

    async def transfer_reversed(self, transfer: Document) -> None:
        """A transfer we sent was reversed (the platform took the share back): recorded on the
        invoice, never sent again. Transfers we did not send (destination charges) are ignored."""
        if not isinstance(transfer.get("id"), str):
            return
        reversed_cents = transfer.get("amount_reversed")
        await self._invoices.update_one(
            {"transferId": transfer["id"], "payout": {"$in": ["routed", "reversed"]}},
            {
                "$set": {
                    "payout": "reversed",
                    "payoutReversedCents": reversed_cents if isinstance(reversed_cents, int) else None,
                    "updatedAt": utcnow(),
                }
            },
        )

    # ---- GET /api/stripe/my-earnings ---------------------------------------------------------

    async def earnings(self, user_id: str) -> Document:
        """Paid invoices of the builder's templates, by template (one aggregation)."""
        self.charger.require_provider()
        pipeline = [
            {"$match": {"builderUserId": user_id, "status": "paid"}},
            {"$sort": {"periodStart": -1}},
            {
                "$group": {
                    "_id": "$templateId",
                    "paidCount": {"$sum": 1},
                    "builderAmountCents": {"$sum": "$builderAmountCents"},
                    "lastPaidAt": {"$first": "$periodStart"},
                }
            },
            {"$sort": {"lastPaidAt": -1}},
        ]
        rows = [row async for row in await self._invoices.aggregate(pipeline)]
        templates = await find_templates(self.store, [row["_id"] for row in rows], "name", "slug")
        by_template = [
            {
                "templateId": row["_id"],
                "name": templates.get(row["_id"], {}).get("name"),
                "slug": templates.get(row["_id"], {}).get("slug"),
                "paidCount": row["paidCount"],
                "builderAmountCents": row["builderAmountCents"],
                "lastPaidAt": iso(row["lastPaidAt"]),
            }
            for row in rows
        ]
        return {
            "totalBuilderAmountCents": sum(row["builderAmountCents"] for row in by_template),
            "byTemplate": by_template,
        }
