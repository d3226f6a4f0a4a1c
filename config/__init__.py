"""Settings and default files (read once, from the environment)."""

from config.parsing import AppKey
from config.settings import Settings

__all__ = ["AppKey", "Settings"]
