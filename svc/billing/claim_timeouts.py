"""How long money-path claims and keys last (shared by the charge, cycle and payout modules)."""

from __future__ import annotations

from datetime import timedelta

# A claim (an invoice being charged, a transfer being sent, a cancel) older than this was
# left by a process that died: the next caller takes it over.
CLAIM_LEASE = timedelta(minutes=5)
# The provider keeps idempotency keys for 24 hours: past that, resuming could charge again.
KEY_LIFETIME = timedelta(hours=23)
# How far back the monthly job looks for installs deleted without cancel billing.
UNBILLED_CANCEL = timedelta(days=400)
BATCH = 200
