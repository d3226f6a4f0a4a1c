"""Maintenance scripts run from a checkout (not shipped in the package)."""
