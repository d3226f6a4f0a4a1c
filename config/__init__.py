"""Settings and default files (read once, from the environment)."""

from config.settings import AppKey, Settings

__all__ = ["AppKey", "Settings"]
