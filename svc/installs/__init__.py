"""Installs: a template deployed onto a platform, its variables and secrets, and who may reach it."""

from svc.installs.installs import CreateInstallBody, Installs, interpolate, is_visible

__all__ = [
    "CreateInstallBody",
    "Installs",
    "interpolate",
    "is_visible",
]
