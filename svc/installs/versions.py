"""An install's versions: the definition a run pinned to a version runs, what the install can
move to, and the versions it has been on (docs/upgrades.md).

A managed run carries the version it was queued on (`templateVersion`), so a run started before
an upgrade finishes on its version and a paused pipeline resumes on it; `run_definition` is the
one place the runtime asks for that definition.
"""

from __future__ import annotations

from typing import Any

from svc.core import Document, NotFound, Store, iso
from svc.installs.fields import interpolate
from svc.templates import published_version, template_head, upgrade_bump, version_log, widens

MAX_HISTORY = 50
AUTO_MODES = ("off", "patch", "minor")


async def definition_of(store: Store, install: Document, version: int) -> dict[str, Any] | None:
    """The raw (not interpolated) definition of one version for this install: its current one, the
    one it last left (kept on the install), else the template's published snapshot."""
    if version == install.get("templateVersion"):
        return dict(install["definition"])
    retained = install.get("retained") or {}
    if retained.get("version") == version:
        return dict(retained["definition"])
    snapshot = await published_version(store, install["templateId"], version)
    return dict(snapshot["definition"]) if snapshot is not None else None


async def run_definition(store: Store, install: Document, version: int | None) -> dict[str, Any]:
    """The definition a run of `install` pinned to `version` runs, with the install's variables
    interpolated as at install time (its current definition when `version` is None or current)."""
    variables = install.get("variables") or {}
    if version is None:
        return interpolate(install["definition"], variables)
    definition = await definition_of(store, install, version)
    if definition is None:
        raise NotFound(f"Version {version} of this install's template is no longer available")
    return interpolate(definition, variables)


async def semver_of(store: Store, install: Document) -> str | None:
    """The semver of the install's current version (kept on the install once it has moved)."""
    if install.get("templateSemver"):
        return str(install["templateSemver"])
    snapshot = await published_version(store, install["templateId"], install["templateVersion"])
    return snapshot.get("semver") if snapshot is not None else None


def history(install: Document) -> list[dict[str, Any]]:
    """The versions the install has been on, newest first (its first version when it never moved)."""
    entries = list(install.get("versionHistory") or [])
    if not entries:
        entries = [first_entry(install)]
    return [
        {
            "version": entry["version"],
            "semver": entry.get("semver"),
            "action": entry["action"],
            "fromVersion": entry.get("fromVersion"),
            "bump": entry.get("bump"),
            "actorId": entry.get("actorId"),
            "via": entry.get("via"),
            "at": iso(entry["at"]),
        }
        for entry in reversed(entries)
    ]


def first_entry(install: Document) -> Document:
    """The history entry of the version the install was created on."""
    return {
        "version": install["templateVersion"],
        "semver": install.get("templateSemver"),
        "action": "install",
        "fromVersion": None,
        "actorId": install.get("deployedBy"),
        "via": None,
        "at": install["createdAt"],
    }


async def availability(
    store: Store, install: Document, have_variables: set[str], have_secrets: set[str]
) -> dict[str, Any]:
    """What the install runs and the newest version it can move to, with the bump class for this
    install, whether it widens permissions, and the change logs in between."""
    head = await template_head(store, install["templateId"])
    current = int(install["templateVersion"])
    latest = int(head["version"]) if head is not None and head.get("status") == "published" else current
    out: dict[str, Any] = {
        "installId": install["_id"],
        "templateId": install["templateId"],
        "templateStatus": head.get("status") if head is not None else None,
        "currentVersion": current,
        "currentSemver": await semver_of(store, install),
        "latestVersion": latest,
        "latestSemver": head.get("semver") if head is not None and latest > current else None,
        "updateAvailable": latest > current,
        "bump": None,
        "reasons": [],
        "widensPermissions": False,
        "changeLogs": [],
        "previousVersion": install.get("previousVersion"),
        "autoUpgrade": (install.get("autoUpgrade") or {}).get("mode", "off"),
        "pendingUpgrade": pending_view(install),
        "history": history(install),
    }
    if latest > current and head is not None:
        bump, reasons, changes = upgrade_bump(
            install["definition"], head["definition"], have_variables, have_secrets
        )
        out.update(
            bump=bump,
            reasons=reasons,
            widensPermissions=widens(changes),
            changeLogs=await version_log(store, install["templateId"], current, latest),
        )
    return out


def update_note(
    install: Document, head: Document | None, have_variables: set[str], have_secrets: set[str]
) -> dict[str, Any] | None:
    """"Update available" for the deployer's home list: the newest version and its class for this
    install (None when the install is on it, or the template is no longer published)."""
    if head is None or head.get("status") != "published" or head["version"] <= install["templateVersion"]:
        return None
    bump, _, changes = upgrade_bump(install["definition"], head["definition"], have_variables, have_secrets)
    return {
        "version": head["version"],
        "semver": head.get("semver"),
        "bump": bump,
        "widensPermissions": widens(changes),
    }


def pending_view(install: Document) -> dict[str, Any] | None:
    """An upgrade waiting for the org's approval, if any."""
    pending = install.get("pendingUpgrade")
    if not pending:
        return None
    return {
        "approvalId": pending.get("approvalId"),
        "toVersion": pending["toVersion"],
        "direction": pending["direction"],
        "requestedBy": pending.get("requestedBy"),
        "requestedAt": iso(pending.get("requestedAt")),
    }
