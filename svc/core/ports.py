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


# ---- what a package asks of a package above it ------------------------------------------
# A lower package never imports a higher one (import-linter's layers), and never reads its
# collections (tests/test_architecture.py, ownership): it is handed the owner's answers as one
# of these by the composition root (svc/wiring.py). Each is implemented in the owning package
# over its own exported read functions (svc.orgs.OrgReads, svc.installs.InstallReads, ...).


class OrgLookups(Protocol):
    """What identity, templates, installs and runtime ask of orgs (svc.orgs.OrgReads)."""

    async def is_member(self, org_id: str, user_id: str) -> bool:
        """Whether the user belongs to the org now (the one membership answer)."""
        ...

    async def member_orgs(self, user_id: str) -> dict[str, dict[str, Any] | None]:
        """The orgs the user belongs to, by id (None: an org whose record is gone)."""
        ...

    async def is_live(self, org_id: str) -> bool:
        """Whether the org exists and is not being deleted."""
        ...

    async def owns_an_org(self, user_id: str) -> bool:
        """Whether the user owns any org."""
        ...

    async def key_org(self, user_id: str | None, org_id: str | None) -> dict[str, Any] | None:
        """The org a key speaks for: a personal key's user's first org, else the org's own."""
        ...

    async def secret_names(self, org_ids: list[str], limit: int | None = None) -> dict[str, set[str]]:
        """The names of each org's secrets, by org id."""
        ...

    async def secret_values(self, org_id: str) -> dict[str, str]:
        """The org's secrets, decrypted, by name."""
        ...


class InstallLookups(Protocol):
    """What identity, runs and templates ask of installs (svc.installs.InstallReads)."""

    async def find(self, install_id: str) -> dict[str, Any] | None:
        """One install, or None."""
        ...

    async def webhook_install_id(self, token: str) -> str | None:
        """The install whose webhook token this is, or None."""
        ...

    async def template_install_ids(self, template_id: str) -> list[str]:
        """The ids of every install of the template."""
        ...

    async def count_active(self, template_id: str) -> int:
        """How many of the template's installs are not cancelled."""
        ...

    async def active_of(
        self, template_id: str, *fields: str, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """The template's installs not cancelled (only `fields` when named)."""
        ...


class RuntimeLookups(Protocol):
    """What runs and installs ask of the runtime (svc.runtime.RuntimeReads)."""

    async def is_runtime_run(self, install_id: str, run_id: str) -> bool:
        """Whether the managed runtime holds a run of this id (or platform run id) for the install."""
        ...

    async def next_runs(self, install_ids: list[str]) -> dict[str, Any]:
        """Install id -> the next fire of its enabled schedule (installs with none are absent)."""
        ...


class PaymentLookups(Protocol):
    """What installs ask of billing (svc.billing.PaymentReads)."""

    async def customer_email(self, customer_id: str) -> str | None:
        """The email a payment customer was created for (None: no such customer)."""
        ...
