"""The heavy-files table names files that exist (a renamed file would silently lose its place)."""

from pathlib import Path

from tests.heavy_first import HEAVY_FILES

ROOT = Path(__file__).resolve().parent.parent


def test_every_heavy_file_exists() -> None:
    assert [path for path in HEAVY_FILES if not (ROOT / path).is_file()] == []
