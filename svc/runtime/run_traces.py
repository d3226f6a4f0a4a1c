"""A run's span, told what the run path knows (tracing, #33; docs/observability.md, "Traces").

The executor (svc/runtime/install_runner.py) says *where* with one line each: `run_span` around the
claimed run (its parent the context stored on the run when it was asked for, the command that
carried it here its parent or link), `started` once the install is read, `ended` after the run's
one end write (outcome, tokens, and the billed amount: one template read, only while tracing).
The agent loop and the tools open their own spans with `plugins.tracing` directly.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager

from pymongo.errors import PyMongoError

from plugins import tracing
from svc.core import Document
from svc.runtime.steps import TeamResult

log = logging.getLogger(__name__)

# (install, completed?, billable?, tokens) -> (pricing model, price in cents, amount in cents) the
# run is billed at (svc.billing.run_charge; injected, billing sits above the runtime).
Costing = Callable[[Document, bool, bool, int], Awaitable[tuple[str, int | None, int]]]


def run_span(run: Document, mode: str) -> AbstractContextManager[tracing.Handle]:
    """The run's `invoke_workflow` span: a start, a resume after a gate (`resume`), or a run a new
    copy of the actor carries on from its journal (`adopt`)."""
    return tracing.run_span(
        run["_id"],
        run.get("source"),
        run.get("trace"),
        retry_of=run.get("retryOf"),
        resumed_gate=(run.get("state") or {}).get("gate") if mode == "resume" else None,
        bypass_gates=bool(run.get("bypassGates")),
        adopted=mode == "adopt",
    )


def started(install: Document) -> None:
    """The run's install, template and platform, on its span."""
    tracing.run_install(
        install["_id"],
        install.get("templateId"),
        install.get("templateVersion"),
        install.get("templateName"),
        install["platform"],
    )


async def ended(
    costing: Costing | None, install: Document, result: TeamResult, tokens_in: int, tokens_out: int
) -> None:
    """The run's outcome, its token totals (the run record's) and what it is billed."""
    tracing.run_finished(result.status, tokens_in, tokens_out, result.error)
    if costing is None or not tracing.enabled():
        return
    try:
        model, price, amount = await costing(
            install, result.status == "completed", result.billable, tokens_in + tokens_out
        )
    except PyMongoError as exc:  # the run has ended: its span goes without the amount
        log.warning("billed amount not traced: %s", type(exc).__name__)
        return
    tracing.run_billed(model, amount, price)
