"""The billing services without the app: the fast world of tests/test_money_*.py.

`make mutate` runs the money modules (svc/billing/charges.py, cycle.py, cancellation.py,
earnings.py, payouts.py) against these tests, so they build the services through the
composition root (`svc.wiring.build_services`, no Ray runtime) over the test's embedded
database and the fake payment provider's real HTTP server: no app, no Ray, a fraction of a
second a test. Users, templates, installs and runs are written straight into the store: the
routes that create them go through the app and Ray, and only the fields the money paths read
are needed here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

# The packages build_services imports when first called, imported here so that mutmut's fork
# server (which collects the tests once) has them loaded before it forks a run per mutant.
import svc.authoring
import svc.orgs
import svc.runtime
import svc.templates  # noqa: F401
from svc.billing import Charges, OnboardBody, Payouts, SetupIntentBody
from svc.core import Store, Vault
from svc.core.store import INDEXES
from svc.wiring import Services, build_services
from tests.fakes.stripe import FakeStripe
from tests.support.billing import CARD, payment_settings, start_fake_stripe

# A fixed past: periods here end long before the wall clock, whenever the suite runs.
T0 = datetime(2025, 3, 1, tzinfo=UTC)


@dataclass
class Money:
    """The test's store, fake provider and the billing services built over them."""

    store: Store
    fake: FakeStripe
    services: Services

    @property
    def charges(self) -> Charges:
        return self.services.charges

    @property
    def payouts(self) -> Payouts:
        return self.services.payouts

    async def user(self, user_id: str, email: str | None = None) -> None:
        await self.store.users.insert_one(
            {"_id": user_id, "email": email or f"{user_id}@example.com", "name": user_id}
        )

    async def builder(self, user_id: str, *, active: bool = True) -> str | None:
        """A builder; with `active`, a payout account onboarded through the provider (its id)."""
        await self.user(user_id)
        return await self.activate(user_id) if active else None

    async def activate(self, user_id: str) -> str:
        """Onboard the user's payout account with the provider until it is active; its id."""
        link = await self.payouts.onboard(user_id, OnboardBody(returnUrl="https://example.com/back"))
        account_id = link["url"].split("/connect/setup/")[1].split("/")[0]
        self.fake.complete_onboarding(account_id)
        assert await self.payouts.status(user_id) == {
            "status": "active",
            "dashboardUrl": f"{self.fake.base_url}/express/{account_id}/dashboard",
        }
        return account_id

    async def template(
        self,
        template_id: str,
        owner: dict[str, str] | None,
        model: str = "per_run",
        price: int | None = 100,
        **extra: Any,
    ) -> None:
        doc = {
            "_id": template_id,
            "kind": "template",
            "name": f"Name {template_id}",
            "slug": f"slug-{template_id}",
            "pricingModel": model,
            "priceUsdCents": price,
            **({"owner": owner} if owner is not None else {}),
            **extra,
        }
        await self.store["templates"].insert_one(doc)

    async def customer(self, email: str) -> str:
        answer = await self.payouts.setup_intent(SetupIntentBody(email=email))
        return str(answer["customerId"])

    async def install(
        self,
        install_id: str,
        template_id: str,
        deployer: str = "u-dep",
        *,
        created: datetime = T0,
        status: str = "completed",
        card: str | None = CARD,
        **extra: Any,
    ) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "_id": install_id,
            "templateId": template_id,
            "templateName": f"Name {template_id}",
            "platform": "svc",
            "owner": {"kind": "user", "id": deployer},
            "deployedBy": deployer,
            "deployerEmail": f"{deployer}@example.com",
            "status": status,
            "createdAt": created,
            **extra,
        }
        if card is not None:
            doc.update(payCustomerId=await self.customer(f"{deployer}@example.com"), payPaymentMethodId=card)
        await self.store.installs.insert_one(doc)
        return doc

    async def runs(
        self,
        install_id: str,
        at: datetime,
        completed: int = 0,
        failed: int = 0,
        tokens: tuple[int, int] = (0, 0),
    ) -> None:
        """Run records of the install at `at` (each with `tokens` in and out), a millisecond apart."""
        docs = [
            {
                "_id": f"r-{install_id}-{at.timestamp()}-{n}",
                "runId": f"run-{at.timestamp()}-{n}",
                "installId": install_id,
                "status": "completed" if n < completed else "failed",
                "inputTokens": tokens[0],
                "outputTokens": tokens[1],
                "createdAt": at + timedelta(milliseconds=n),
            }
            for n in range(completed + failed)
        ]
        if docs:
            await self.store["runs"].insert_many(docs)

    async def invoice(self, install_id: str) -> dict[str, Any]:
        docs = await self.store["invoices"].find({"installId": install_id}).to_list(10)
        assert len(docs) == 1, docs
        return docs[0]

    def charge_keys(self) -> list[str | None]:
        return [key for path, key in self.fake.keys if path == "/v1/payment_intents"]

    def transfer_keys(self) -> list[str | None]:
        return [key for path, key in self.fake.keys if path == "/v1/transfers"]


async def money_world(store: Store, make_settings: Any, aiohttp_server: Any, **switches: Any) -> Money:
    """The fake provider (with these switches) and the services wired to it."""
    fake = await start_fake_stripe(aiohttp_server, **switches)
    settings = make_settings(**payment_settings(fake))
    # Only the invoices' indexes (one invoice per install and period is what a race relies on):
    # every index of the store costs a fifth of a second a test.
    for index in INDEXES["invoices"]:
        await store["invoices"].create_index(index.keys, **index.kwargs())
    return Money(store, fake, build_services(settings, store, Vault(settings.secret_keys), None))
