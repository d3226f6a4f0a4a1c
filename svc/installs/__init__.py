"""Installs: a template deployed onto a platform, its variables and secrets, and who may reach it."""

from svc.installs.fields import CreateInstallBody, interpolate
from svc.installs.installs import Installs, touch_last_run
from svc.installs.reach import builder_reaches, deployer_reaches, is_visible, reaches
from svc.installs.run_poller import RunPoller

__all__ = [
    "CreateInstallBody",
    "Installs",
    "RunPoller",
    "builder_reaches",
    "deployer_reaches",
    "interpolate",
    "is_visible",
    "reaches",
    "touch_last_run",
]
