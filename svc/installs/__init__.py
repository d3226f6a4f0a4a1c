"""Installs: a template deployed onto a platform, its variables and secrets, and who may reach it."""

from svc.installs.auto_upgrades import AutoUpgrades
from svc.installs.fields import ENCRYPTED, CreateInstallBody, interpolate
from svc.installs.installs import Installs
from svc.installs.limits import LimitsBody, limits_of, set_limits
from svc.installs.lookups import (
    InstallReads,
    billable_installs,
    find_install,
    find_installs,
    installs_of_agent,
    org_install_ids,
    ready_versions,
)
from svc.installs.reach import builder_reaches, deployer_reaches, is_visible, reaches
from svc.installs.run_poller import RunPoller
from svc.installs.upgrade_plan import AutoUpgradeBody, UpgradeBody
from svc.installs.upgrades import Upgrades
from svc.installs.versions import run_definition

__all__ = [
    "ENCRYPTED",
    "AutoUpgradeBody",
    "AutoUpgrades",
    "CreateInstallBody",
    "InstallReads",
    "Installs",
    "LimitsBody",
    "RunPoller",
    "UpgradeBody",
    "Upgrades",
    "billable_installs",
    "builder_reaches",
    "deployer_reaches",
    "find_install",
    "find_installs",
    "installs_of_agent",
    "interpolate",
    "is_visible",
    "limits_of",
    "org_install_ids",
    "reaches",
    "ready_versions",
    "run_definition",
    "set_limits",
]
