"""Fault injection in the database: the embedded server's `failCommand` failpoint (the test-only
command MongoDB's own driver tests use), aimed at one client kind by its application name.

Install actors connect as `svc-actor` (actors/install_actor.py), so a failpoint for that name
fails or freezes exactly the install actors' commands while the test's own reads go on.
"""

from __future__ import annotations

from typing import Any

from actors.install_actor import APP_NAME as ACTORS
from svc.core import Store

__all__ = ["ACTORS", "fail", "freeze", "off"]


async def _configure(store: Store, mode: Any, data: dict[str, Any]) -> None:
    await store.client.admin.command("configureFailPoint", "failCommand", mode=mode, data=data)


async def fail(store: Store, commands: list[str], times: int = 1, app: str = ACTORS, code: int = 8) -> None:
    """The next `times` of these commands from `app` fail (code 8, UnknownError: an error the
    driver does not retry, as a database that stops answering mid-write leaves its caller)."""
    await _configure(store, {"times": times}, {"failCommands": commands, "errorCode": code, "appName": app})


async def freeze(store: Store, commands: list[str], ms: int, times: int = 1, app: str = ACTORS) -> None:
    """The next `times` of these commands from `app` wait `ms` before they run (the sender hangs
    there: a test kills it at that very point)."""
    data = {"failCommands": commands, "blockConnection": True, "blockTimeMS": ms, "appName": app}
    await _configure(store, {"times": times}, data)


async def off(store: Store) -> None:
    """No failpoint."""
    await _configure(store, "off", {})
