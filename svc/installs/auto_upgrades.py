"""Automatic upgrades: a published version moves the installs opted into it (docs/upgrades.md).

The job runner (svc/jobs.py) calls `tick` every second. The job walks published versions in
the order they were published, and for each one the installs of its template opted into
automatic upgrades, a bounded batch per tick. Its progress (the last version finished, the
version in progress and the last install done) is one document, written after each batch under
a lease: a scheduler that dies mid-batch leaves the lease to expire and the next tick does the
batch again, which is safe because an install already on the version is skipped and the mail
sent instead of an upgrade is claimed once per install and version.

An install opted into `patch` takes PATCH versions, one opted into `minor` PATCH and MINOR ones
(the class is the install's own, as the plan computes it); MAJOR versions are never applied
automatically (their publish mails every deployer already). When the version is above the
install's setting, or its plan needs new values, widens permissions, needs the org's approval
or cannot be made on the platform, the deployer is mailed instead, once per version.
"""

from __future__ import annotations

import logging
import secrets as random
from datetime import datetime, timedelta
from typing import Any

from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError

from svc.core import Document, ServiceError, Store, Timeline, actor_of, aware
from svc.installs.upgrade_apply import Actor, Values
from svc.installs.upgrade_plan import Plan, UpgradeBody
from svc.installs.upgrades import Upgrades
from svc.templates import releases_after

log = logging.getLogger(__name__)

COLLECTION = "auto_upgrade_state"
STATE_ID = "releases"
BATCH = 20
LEASE = timedelta(minutes=5)
TAKES = {"patch": ("PATCH",), "minor": ("PATCH", "MINOR")}
SYSTEM = Actor(None, "auto-upgrade")


class AutoUpgrades:
    """The automatic-upgrade job: one bounded, resumable batch per tick."""

    def __init__(self, store: Store, upgrades: Upgrades, public_url: str, batch: int = BATCH) -> None:
        self.store = store
        self.upgrades = upgrades
        self.public_url = public_url
        self.batch = batch

    async def tick(self, now: datetime) -> int:
        """Process one batch if a published version is waiting; how many installs were looked at."""
        state = await self._claim(now)
        if state is None:
            return 0
        token = state["token"]
        current = state.get("current")
        if current is None:
            after = state["after"]
            found = await releases_after(self.store, (aware(after["publishedAt"]), after["id"]), 1)
            if not found:
                await self._save(token, {"leaseUntil": None})
                return 0
            release = found[0]
            current = {
                "templateId": release["templateId"],
                "version": release["version"],
                "publishedAt": release["publishedAt"],
                "snapshotId": release["_id"],
                "afterInstall": "",
            }
        query: Document = {
            "templateId": current["templateId"],
            "status": "completed",
            "autoUpgrade.mode": {"$in": list(TAKES)},
            "_id": {"$gt": current["afterInstall"]},
        }
        batch = await self.store.installs.find(query).sort("_id", 1).to_list(self.batch)
        for install in batch:
            await self.consider(install, int(current["version"]))
        if len(batch) < self.batch:
            done = {"publishedAt": current["publishedAt"], "id": current["snapshotId"]}
            await self._save(token, {"after": done, "current": None, "leaseUntil": None})
        else:
            progress = {**current, "afterInstall": batch[-1]["_id"]}
            await self._save(token, {"current": progress, "leaseUntil": None})
        return len(batch)

    async def consider(self, install: Document, version: int) -> str:
        """Upgrade one opted-in install to `version` if its plan allows it unattended, else mail
        the deployer (once per version); what happened: skipped, upgraded, mailed or failed."""
        mode = (install.get("autoUpgrade") or {}).get("mode", "off")
        if mode not in TAKES or int(install["templateVersion"]) >= version:
            return "skipped"
        try:
            plan = await self.upgrades.plan(install, UpgradeBody(version=version), "upgrade")
        except ServiceError as exc:  # archived template, version gone, install changed
            log.info("automatic upgrade skipped: %s", exc.message, extra={"installId": install["_id"]})
            return "skipped"
        if plan.bump == "MAJOR":  # never automatic; its publish mailed every deployer already
            return "skipped"
        needs = self._needs(plan)
        if plan.bump not in TAKES[mode]:
            takes = " and ".join(TAKES[mode])
            needs.insert(0, f"it is a {plan.bump} version; this install takes {takes} versions automatically")
        if needs:
            await self._mail_once(install, plan, version, needs)
            return "mailed"
        try:
            await self.upgrades.apply(install, plan, Values(), SYSTEM)
        except ServiceError as exc:
            await Timeline(self.store).record(
                "version",
                "install.upgrade_failed",
                install_id=install["_id"],
                actor=actor_of(None, SYSTEM.via),
                meta={"toVersion": version, "reason": exc.message},
            )
            await self._mail_once(install, plan, version, [f"the automatic upgrade failed: {exc.message}"])
            return "failed"
        return "upgraded"

    @staticmethod
    def _needs(plan: Plan) -> list[str]:
        """Why the plan cannot be applied unattended (empty: it can)."""
        needs = []
        if plan.missing_variables or plan.missing_secrets:
            names = [*plan.missing_variables, *plan.missing_secrets]
            needs.append("it needs values the install lacks: " + ", ".join(names))
        if plan.widened:
            agents = ", ".join(plan.widened_agents)
            needs.append(f"it lets agents reach more than before ({agents}): accept it in the plan")
        if plan.approval_reason is not None:
            needs.append(f"the org's approval is needed ({plan.approval_reason})")
        if not plan.platform["inPlace"]:
            needs.append(plan.platform["reason"] or "the platform cannot make it in place")
        needs += plan.problems
        return needs

    async def _mail_once(self, install: Document, plan: Plan, version: int, needs: list[str]) -> None:
        """The mail sent instead of an upgrade, claimed once per install and version."""
        claimed = await self.store.installs.update_one(
            {"_id": install["_id"], "autoUpgrade.notifiedVersion": {"$ne": version}},
            {"$set": {"autoUpgrade.notifiedVersion": version}},
        )
        if not claimed.modified_count:
            return
        target = f"version {version}" + (f" ({plan.target.semver})" if plan.target.semver else "")
        reasons = "\n".join(f"- {need}" for need in needs)
        await self.upgrades.mail_deployer(
            install,
            f"{install['templateName']}: {target} is available ({plan.bump}); not applied automatically",
            f"Your install {install['_id']} is opted into automatic upgrades, but {target} was not "
            f"applied because:\n{reasons}\n\nReview the plan and apply it: "
            f"{self.public_url}/installs/{install['_id']}/versions",
            kind="install.upgrade_available",
        )

    async def _claim(self, now: datetime) -> Document | None:
        """The job's state under a fresh lease (None while another scheduler holds it)."""
        try:
            # The first run starts from now: versions published before the job existed are not replayed.
            start = {"publishedAt": now, "id": ""}
            await self.store[COLLECTION].insert_one(
                {"_id": STATE_ID, "after": start, "current": None, "leaseUntil": None}
            )
        except DuplicateKeyError:
            pass
        token = random.token_hex(12)
        return await self.store[COLLECTION].find_one_and_update(
            {"_id": STATE_ID, "$or": [{"leaseUntil": None}, {"leaseUntil": {"$lte": now}}]},
            {"$set": {"token": token, "leaseUntil": now + LEASE}},
            return_document=ReturnDocument.AFTER,
        )

    async def _save(self, token: str, changes: dict[str, Any]) -> None:
        await self.store[COLLECTION].update_one({"_id": STATE_ID, "token": token}, {"$set": changes})
