"""What the domain needs from the outside, as Protocols (implemented in actors/, plugins/, ...)."""

from __future__ import annotations

from typing import Any, Protocol

from svc.core.run_commands import (
    Accepted,
    Cancel,
    Cancelled,
    Continue,
    Continued,
    RunOutcome,
    StartRun,
    Watched,
    WatchEvents,
)


class RuntimeFailure(Exception):
    """The runtime could not carry out a run (its worker died, or it is unavailable)."""


class Runtime(Protocol):
    """The actor runtime (Ray) as the domain sees it: typed commands to an install's actor
    (svc/core/run_commands.py). RuntimeFailure when the actor cannot be started or reached."""

    async def ping(self) -> bool:
        """True when the runtime answers."""
        ...

    async def run(self, install_id: str, command: StartRun, wait_s: float) -> RunOutcome:
        """Start the queued run in the install's actor and wait up to `wait_s` for it to end or
        pause; past that, its state then (the run goes on)."""
        ...

    async def submit(self, install_id: str, command: StartRun) -> Accepted:
        """Hand the queued run to the install's actor without waiting for it."""
        ...

    async def cancel(self, install_id: str, command: Cancel) -> Cancelled:
        """Ask the install's actor to cancel a run."""
        ...

    async def resume(self, install_id: str, command: Continue) -> Continued:
        """Ask the install's actor to continue a paused run."""
        ...

    async def events(self, install_id: str, command: WatchEvents) -> Watched:
        """A run's events from the actor that holds it (`live` False when none does)."""
        ...

    async def wake(self, install_id: str) -> None:
        """Make sure the install's actor lives: its recovery adopts the runs a dead copy left."""
        ...


class Governance(Protocol):
    """Deployment approval for org installs (implemented by svc.orgs.Orgs)."""

    async def requires_approval(self, owner: dict[str, str]) -> bool:
        """True when a new install for this owner must wait for an owner's or admin's approval."""
        ...

    async def request_approval(self, install: dict[str, Any], principal: Any) -> str:
        """Open the approval request for a waiting install and notify the approvers; its id."""
        ...

    async def requires_eval_suite(self, owner: dict[str, str]) -> bool:
        """True when this owner's templates publish only with an eval suite that passes (an org
        that asks so under governance; docs/evals.md)."""
        ...

    async def upgrade_approval(self, owner: dict[str, str], bump: str, widens: bool) -> str | None:
        """Why an install of this owner may not move to another version without approval: a MAJOR
        or widening move under governance, any move when the org asks so (None: it may)."""
        ...

    async def request_upgrade_approval(
        self, install: dict[str, Any], requester_id: str | None, upgrade: dict[str, Any]
    ) -> str:
        """Open the approval request for an install's move ({toVersion, direction, bump, ...}) and
        notify the approvers, as for a new install; its id."""
        ...

    async def record_install_event(
        self, install: dict[str, Any], action: str, actor_id: str | None, meta: dict[str, Any]
    ) -> None:
        """Add an event of an org's install to the org's audit log (nothing for a personal one)."""
        ...
