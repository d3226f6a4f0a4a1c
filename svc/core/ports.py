"""What the domain needs from the outside, as Protocols (implemented in actors/, plugins/, ...)."""

from __future__ import annotations

from typing import Any, Protocol


class RuntimeFailure(Exception):
    """The runtime could not carry out a run (its worker died, or it is unavailable)."""


class Runtime(Protocol):
    """The actor runtime (Ray) as the domain sees it."""

    async def ping(self) -> bool:
        """True when the runtime answers."""
        ...

    async def run(self, install_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Start the queued run `payload["runId"]` in the install's actor and wait for the outcome;
        RuntimeFailure if the actor cannot be started or dies."""
        ...

    async def submit(self, install_id: str, payload: dict[str, Any]) -> None:
        """Hand the queued run `payload["runId"]` to the install's actor without waiting for it;
        RuntimeFailure when it cannot be handed over (it stays queued)."""
        ...

    async def cancel(self, install_id: str, run_id: str) -> dict[str, Any]:
        """Ask the install's actor to cancel a run: {cancelled: bool, step: key | "" | None}."""
        ...

    async def resume(self, install_id: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Ask the install's actor to continue a paused run ({runId?, bypassGates, actor}):
        {ok, runId, gate} or {conflict: message}."""
        ...


class Governance(Protocol):
    """Deployment approval for org installs (implemented by svc.orgs.Orgs)."""

    async def requires_approval(self, owner: dict[str, str]) -> bool:
        """True when a new install for this owner must wait for an owner's or admin's approval."""
        ...

    async def request_approval(self, install: dict[str, Any], principal: Any) -> str:
        """Open the approval request for a waiting install and notify the approvers; its id."""
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
