"""Installs: a template deployed onto a platform, its variables and secrets, and who may reach it."""

from svc.installs.fields import ENCRYPTED, CreateInstallBody, interpolate
from svc.installs.installs import Installs, note_last_run
from svc.installs.limits import LimitsBody, limits_of, set_limits
from svc.installs.reach import builder_reaches, deployer_reaches, is_visible, reaches
from svc.installs.run_poller import RunPoller

__all__ = [
    "ENCRYPTED",
    "CreateInstallBody",
    "Installs",
    "LimitsBody",
    "RunPoller",
    "builder_reaches",
    "deployer_reaches",
    "interpolate",
    "is_visible",
    "limits_of",
    "note_last_run",
    "reaches",
    "set_limits",
]
