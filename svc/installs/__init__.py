"""Installs: a template deployed onto a platform, its variables and secrets, and who may reach it."""

from svc.installs.fields import CreateInstallBody, interpolate
from svc.installs.installs import Installs
from svc.installs.reach import deployer_reaches, is_visible, reaches

__all__ = [
    "CreateInstallBody",
    "Installs",
    "deployer_reaches",
    "interpolate",
    "is_visible",
    "reaches",
]
