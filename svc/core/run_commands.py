"""The commands an API process (or the scheduler) sends to an install's actor, and their answers.

Typed, so neither side tests a dictionary for keys: they cross the `Runtime` port
(svc/core/ports.py) and, through it, a Ray call (actors/runtime.py). Every command that
changes a run is idempotent by run id, because Ray may report an error for a call that did
run: a repeated start joins the running run, a repeated cancel finds it settled.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

Document = dict[str, Any]


@dataclass(frozen=True)
class StartRun:
    """Start a queued run. `run` is the run exactly as the sender stored it (`ledger.new_run`), so
    the actor claims it without reading it back; `trace` carries the caller's trace context."""

    run: Document
    trace: dict[str, str] = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        return str(self.run["_id"])


@dataclass(frozen=True)
class RunOutcome:
    """Where a run stands when the answer is given: ended, paused at a gate, or still going (a
    synchronous caller's deadline passed first). `refused`: it never ran because its install was
    not ready (True: 409 to a synchronous caller) or is gone (False: 404); `conflict`: a spend cap
    refused it (409 with `extra`)."""

    runId: str
    status: str
    response: str | None = None
    agent: str | None = None
    inputTokens: int = 0
    outputTokens: int = 0
    errorMessage: str | None = None
    pausedAtGate: str | None = None
    refused: bool | None = None
    conflict: str | None = None
    extra: dict[str, Any] | None = None

    def wire(self) -> dict[str, Any]:
        """The spec's run response: {runId, status, response, agent, inputTokens, outputTokens},
        plus errorMessage when it failed and pausedAtGate when it paused."""
        out = {k: v for k, v in asdict(self).items() if k not in ("refused", "conflict", "extra")}
        for optional in ("errorMessage", "pausedAtGate"):
            if out[optional] is None:
                del out[optional]
        return out

    @property
    def settled(self) -> bool:
        """Ended or paused: the answer will not change without a new command."""
        return self.status in ("completed", "failed", "paused")


@dataclass(frozen=True)
class Accepted:
    """A start was taken (the run is queued or running in the actor); `position` is its place in
    the actor's queue when the actor is at its bound of runs at once (0: running)."""

    runId: str
    position: int = 0


@dataclass(frozen=True)
class Continue:
    """Resume a paused run: the oldest, or `run_id`. `decision` settles what the gate asks: for a
    pipeline gate, nothing; for a tool call awaiting approval, `approve` or `reject`; for a request
    whose outcome is unknown, `done` (with `note`), `resend` or `fail`. `trace` carries the trace
    context of whoever continued it."""

    run_id: str | None = None
    bypass_gates: bool = False
    actor: dict[str, Any] = field(default_factory=dict)
    decision: str | None = None
    note: str | None = None
    # The trace context of whoever continued it: the resumed part links to it (tracing, #33).
    trace: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Continued:
    """The answer to `Continue`: the run resumed and its gate, or why nothing was resumed."""

    runId: str | None = None
    gate: str | None = None
    conflict: str | None = None


@dataclass(frozen=True)
class Cancel:
    """Cancel a run of the install; `paused`: a paused one too (an eval run whose case is judged:
    nobody continues it, docs/evals.md)."""

    run_id: str
    paused: bool = False
    reason: str = "Run cancelled"  # the run's errorMessage


@dataclass(frozen=True)
class Cancelled:
    """Whether the run was stopped (or never starts), and the step it was in."""

    cancelled: bool
    step: str | None = None


@dataclass(frozen=True)
class WatchEvents:
    """The run's events after `after`, waiting up to `wait_s` for one when there is none yet."""

    run_id: str
    after: int = 0
    wait_s: float = 0.0


@dataclass(frozen=True)
class Watched:
    """A run's events (in wire form) a watcher gets. `live` False: the run is not held by this
    actor (ended, or never here), so the watcher reads the stored events instead."""

    events: list[dict[str, Any]]
    live: bool


@dataclass(frozen=True)
class AskAgain:
    """This copy of the actor is leaving (idle, or older than the published configuration): the
    sender asks the next copy, which Ray creates under the same name."""
