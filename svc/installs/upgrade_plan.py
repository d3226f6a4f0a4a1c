"""The plan of an install's move to another version: what changes, what it needs, what the
platform will do, and whether it may go ahead (docs/upgrades.md).

A plan is computed, never stored: the dry run answers it, and applying computes it again from
the install as it is then, so what is applied is what the checks saw. The deployer accepts the
widened permissions by sending the plan's `acceptance` digest back, which binds the acceptance
to exactly those changes (a plan that changed since needs a new look).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from plugins.types import UpgradeResult
from svc.core import BadRequest, Conflict, Document, NotFound, RequestBody, Store, aware, iso
from svc.installs.fields import FieldValue
from svc.templates import (
    price_in_force,
    price_label,
    published_version,
    structured_diff,
    template_head,
    upgrade_bump,
    version_log,
    widened_agents,
)

Direction = Literal["upgrade", "rollback"]
MAX_VERSION = 2**31 - 1


class UpgradeBody(RequestBody):
    """POST /api/installs/:installId/upgrade (and .../rollback): the target, the values it needs,
    the acceptance of widened permissions; `dryRun` answers the plan and changes nothing."""

    version: int | None = Field(
        default=None, ge=1, le=MAX_VERSION, description="the version to move to (upgrade: the newest)"
    )
    templateId: str | None = Field(
        default=None, max_length=64, description="optional; must be the install's own template"
    )
    dryRun: bool = False
    variables: dict[str, FieldValue] | None = Field(default=None, max_length=100)
    secrets: dict[str, FieldValue] | None = Field(default=None, max_length=500)
    acceptPermissions: str | None = Field(
        default=None, max_length=128, description="the plan's `permissions.acceptance` digest"
    )


class AutoUpgradeBody(RequestBody):
    """PATCH /api/installs/:installId/auto-upgrade."""

    mode: Literal["off", "patch", "minor"] = Field(
        description="off, patch (PATCH versions) or minor (PATCH and MINOR versions)"
    )


@dataclass(frozen=True)
class Target:
    """The version to move to."""

    version: int
    semver: str | None
    definition: dict[str, Any]
    change_log: str | None
    published_at: datetime | None
    pricing: tuple[str | None, int | None]


@dataclass
class Plan:
    """Everything a move changes and needs; `view()` is what the API answers."""

    install: Document
    direction: Direction
    current_semver: str | None
    target: Target
    bump: str
    reasons: list[str]
    permissions: list[dict[str, Any]]
    missing_variables: list[str]
    missing_secrets: list[str]
    platform: dict[str, Any]
    platform_result: UpgradeResult
    change_logs: list[dict[str, Any]]
    pricing: dict[str, Any]
    approval_reason: str | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def widened_agents(self) -> list[str]:
        """The agents that may reach more than before, over HTTP or MCP (the deployer accepts it)."""
        return widened_agents(self.permissions)

    @property
    def widened(self) -> bool:
        """Whether an agent may reach more than before (the deployer must accept it)."""
        return bool(self.widened_agents)

    @property
    def acceptance(self) -> str | None:
        """The digest that accepts exactly these widened permissions of exactly this move."""
        if not self.widened:
            return None
        agents = self.widened_agents
        widened = [(c["agent"], c["widened"], c["mcp"]) for c in self.permissions if c["agent"] in agents]
        payload = [self.install["_id"], self.install["templateVersion"], self.target.version, widened]
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]

    @property
    def ready(self) -> bool:
        """Nothing missing, nothing refused: applying can go ahead (after acceptance, approval)."""
        return not (self.missing_variables or self.missing_secrets or self.problems) and bool(
            self.platform["inPlace"]
        )

    def view(self) -> dict[str, Any]:
        """The plan as the API and the dashboard show it."""
        current = self.install["definition"]
        diff = structured_diff(current, self.target.definition)
        return {
            "installId": self.install["_id"],
            "direction": self.direction,
            "from": {"version": self.install["templateVersion"], "semver": self.current_semver},
            "to": {
                "version": self.target.version,
                "semver": self.target.semver,
                "changeLog": self.target.change_log,
                "publishedAt": iso(self.target.published_at),
            },
            "bump": self.bump,
            "reasons": self.reasons,
            "changeLogs": self.change_logs,
            "agents": {k: diff["agents"][k] for k in ("added", "removed", "renamed")},
            "diff": diff,
            "missing": {"variables": self.missing_variables, "secrets": self.missing_secrets},
            "permissions": {
                "changes": self.permissions,
                "widened": self.widened,
                "acceptance": self.acceptance,
            },
            "platform": self.platform,
            "pricing": self.pricing,
            "approvalRequired": self.approval_reason is not None,
            "approvalReason": self.approval_reason,
            "problems": self.problems,
            "ready": self.ready,
        }


def require_movable(install: Document) -> None:
    """409 for a cancelled install or one not ready (provisioning, waiting for approval)."""
    if install["status"] == "cancelled":
        raise Conflict("Install is cancelled")
    if install["status"] != "completed":
        raise Conflict(f"Install is not ready (status: {install['status']})")


async def resolve_target(
    store: Store, install: Document, body: UpgradeBody, direction: Direction
) -> Target:
    """The version a move goes to, refused with the issue's answers: another template's version
    (400), one not published (404), the current one (409), the wrong direction (400), an
    archived template's newer version (409), a rollback with nothing to go back to (409: none
    named and the version left last is not older, as right after a rollback; so a rollback sent
    twice gets a 409 whether the second finds the first in flight or done)."""
    require_movable(install)
    if body.templateId is not None and body.templateId != install["templateId"]:
        raise BadRequest(
            f"templateId: an install moves between versions of its own template ({install['templateId']})"
        )
    current = int(install["templateVersion"])
    head = await template_head(store, install["templateId"])
    if head is None:
        raise NotFound("Template not found")
    version = body.version
    if direction == "upgrade":
        version = version if version is not None else int(head["version"])
        if version < current:
            raise BadRequest(
                f"version: {version} is older than the install's version {current}; "
                f"use POST /api/installs/{install['_id']}/rollback"
            )
    else:
        if version is None:  # the version left last, when it is older: after a rollback it is not
            version = install.get("previousVersion")
            if version is None or version >= current:
                raise Conflict("Install has no earlier version to roll back to")
        if version > current:
            raise BadRequest(
                f"version: {version} is newer than the install's version {current}; "
                f"use POST /api/installs/{install['_id']}/upgrade"
            )
    if version == current:
        raise Conflict(f"Install is already on version {current}")
    if version > int(head["version"]):
        raise NotFound(f"Version {version} of this template is not published")
    if direction == "upgrade" and head["status"] != "published":
        raise Conflict(f"Template is {head['status']}; its versions are no longer offered for upgrades")
    snapshot = await published_version(store, install["templateId"], version)
    if snapshot is None and version == int(head["version"]):
        snapshot = {**head, "publishedAt": None, "changeLog": None}
    retained = install.get("retained") or {}
    if snapshot is None and retained.get("version") == version:
        snapshot = {"definition": retained["definition"], "semver": retained.get("semver")}
    if snapshot is None:
        raise NotFound(f"Version {version} of this template is not published")
    return Target(
        version=version,
        semver=snapshot.get("semver"),
        definition=dict(snapshot["definition"]),
        change_log=snapshot.get("changeLog"),
        published_at=snapshot.get("publishedAt"),
        pricing=(snapshot.get("pricingModel"), snapshot.get("priceUsdCents")),
    )


def missing_values(
    target: dict[str, Any], variables: set[str], secrets: set[str] | None
) -> tuple[list[str], list[str]]:
    """The target's required variables and secrets the install (with the values sent) lacks;
    secrets count only on platforms that take them (`secrets` None)."""
    missing_vars = [v for v in target.get("requiredVariables") or [] if v not in variables]
    if secrets is None:
        return missing_vars, []
    return missing_vars, [s for s in target.get("requiredSecrets") or [] if s not in secrets]


def classify(
    install: Document, target: Target, variables: set[str], secrets: set[str] | None
) -> tuple[str, list[str], list[dict[str, Any]]]:
    """The install-relative bump of the move (svc.templates.upgrade_bump)."""
    held = secrets if secrets is not None else set(target.definition.get("requiredSecrets") or [])
    return upgrade_bump(install["definition"], target.definition, variables, held)


async def change_logs(store: Store, install: Document, target: Target) -> list[dict[str, Any]]:
    """The published versions the move crosses, newest first, with their change logs."""
    return await version_log(store, install["templateId"], int(install["templateVersion"]), target.version)


async def pricing(store: Store, install: Document, target: Target, now: datetime) -> dict[str, Any]:
    """What the install pays: a price belongs to the template, not to a version (docs/billing.md),
    so a move never changes it; a version published with another price scheduled that price
    for the next billing period, which is shown with the date it applies from."""
    head = await template_head(store, install["templateId"]) or {}
    model, price = price_in_force(head, now)
    scheduled = [
        entry
        for entry in head.get("priceHistory") or []
        if entry.get("from") is not None and aware(entry["from"]) > now
    ]
    recorded_model, recorded_price = target.pricing
    recorded = (recorded_model, recorded_price) if recorded_model is not None else None
    return {
        "inForce": {"pricingModel": model, "priceUsdCents": price, "label": price_label(model, price)},
        "version": None
        if recorded is None
        else {"pricingModel": recorded[0], "priceUsdCents": recorded[1], "label": price_label(*recorded)},
        "scheduled": [
            {
                "pricingModel": entry["pricingModel"],
                "priceUsdCents": entry.get("priceUsdCents"),
                "label": price_label(entry["pricingModel"], entry.get("priceUsdCents")),
                "effectiveFrom": iso(entry["from"]),
            }
            for entry in scheduled
        ],
    }


def platform_section(
    platform: str, managed: bool, result: UpgradeResult, target_version: int
) -> dict[str, Any]:
    """What happens on the platform, from the driver's dry run."""
    section: dict[str, Any] = {
        "id": platform,
        "inPlace": result.supported,
        "reason": result.reason,
        "changes": [{"key": c.key, "action": c.action, "detail": c.detail} for c in result.changes],
    }
    if managed:
        section["runs"] = (
            f"New runs use version {target_version}; runs already queued, running or paused at a "
            "gate finish on the version they started on."
        )
    return section


def check_values(body: UpgradeBody, target: dict[str, Any], takes_secrets: bool) -> None:
    """400 for a variable the target does not declare, a bad secret name, or secrets on a
    platform that takes none."""
    declared = set(target.get("requiredVariables") or [])
    for name in body.variables or {}:
        if name not in declared:
            raise BadRequest(f"variables.{name} is not a required variable of the target version")
    if body.secrets and not takes_secrets:
        raise BadRequest("secrets are not accepted for this install's platform")


def refusal(plan: Plan) -> BadRequest | Conflict | None:
    """Why applying must not go ahead, as the answer to give (None: it may)."""
    if plan.missing_variables or plan.missing_secrets:
        parts = []
        if plan.missing_variables:
            parts.append("variables " + ", ".join(plan.missing_variables))
        if plan.missing_secrets:
            parts.append("secrets " + ", ".join(plan.missing_secrets))
        return BadRequest(
            f"Version {plan.target.version} needs values this install lacks: {'; '.join(parts)} "
            "(send them as variables and secrets)",
            missingVariables=plan.missing_variables,
            missingSecrets=plan.missing_secrets,
        )
    if plan.problems:
        return BadRequest("; ".join(plan.problems))
    if not plan.platform["inPlace"]:
        return Conflict(
            f"{plan.platform['reason'] or 'The platform cannot make this change in place'}; "
            f"the install stays on version {plan.install['templateVersion']}"
        )
    return None


def acceptance_refusal(plan: Plan, accepted: str | None) -> BadRequest | None:
    """400 unless widened permissions are accepted with this plan's digest."""
    if not plan.widened or accepted == plan.acceptance:
        return None
    agents = ", ".join(plan.widened_agents)
    if accepted is None:
        return BadRequest(
            f"acceptPermissions: this change lets agents reach more than before ({agents}); review "
            "the plan (dryRun) and send its permissions.acceptance",
            acceptance=plan.acceptance,
        )
    return BadRequest(
        "acceptPermissions: does not match this plan's permission changes; review the plan again",
        acceptance=plan.acceptance,
    )
