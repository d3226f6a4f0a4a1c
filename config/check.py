"""`python -m config.check`: read the settings as start-up does, without starting anything.

Prints where the data lives, or the one-line error that would stop start-up (exit 2).
"""

from __future__ import annotations

from config.settings import settings_or_exit


def main() -> int:
    """Check the environment and the dotenv file."""
    settings = settings_or_exit()
    models = f"models from {settings.models_file}" if settings.models_file else "default model names"
    print(f"settings ok; data directory {settings.data_dir}; {models}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
