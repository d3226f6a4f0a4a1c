"""Operator commands find the service's database or say that there is none (docs/settings.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from svc.subprocesses import EmbeddedMongo, NoDatabaseError, require_database


async def test_no_database_is_refused_and_a_real_one_is_found(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with pytest.raises(NoDatabaseError, match=r"no database in .*start `svc serve` first"):
        require_database(data_dir)
    assert not data_dir.exists(), "the check creates nothing"

    server = EmbeddedMongo(data_dir)
    await server.start()
    try:
        require_database(data_dir)  # a running server
    finally:
        await server.stop()
    require_database(data_dir)  # its stored data, server stopped
