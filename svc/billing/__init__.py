"""Money: usage maths, charges and invoices, payouts, the payment provider and org plans."""

from svc.billing.charges import ChargeCycleBody, Charges
from svc.billing.lookups import PaymentReads, customer_email
from svc.billing.org_billing import OrgBilling
from svc.billing.payments import PaymentProvider
from svc.billing.payouts import OnboardBody, Payouts, SetupIntentBody
from svc.billing.run_cost import run_charge, run_cost
from svc.billing.spend_caps import SpendCaps
from svc.billing.usage import BillingQuery, UsageReport

__all__ = [
    "BillingQuery",
    "ChargeCycleBody",
    "Charges",
    "OnboardBody",
    "OrgBilling",
    "PaymentProvider",
    "PaymentReads",
    "Payouts",
    "SetupIntentBody",
    "SpendCaps",
    "UsageReport",
    "customer_email",
    "run_charge",
    "run_cost",
]
