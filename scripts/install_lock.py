"""Where the outside systems the live tests and benches fetch are installed (Paperclip, the MCP
servers, Phoenix: the machine's cache, shared by every checkout; the LangGraph peer: the
checkout's `.cache/`), one installer at a time, and one running copy where a system cannot run
twice on a machine (Paperclip's embedded Postgres has a fixed port).

The test suite runs in several processes at once (pytest-xdist, `make test`), and two of them
may want the same install; a lock file in the cache directory makes the second wait for the
first and then find the stamp it wrote, instead of both writing one directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO


def machine_cache(name: str, chosen: str | None, other_users: bool = False) -> Path:
    """Where the outside system `name` is installed: `chosen` (its SVC_*_CACHE variable) when set, else
    `$XDG_CACHE_HOME/svc/<name>` (`~/.cache/svc/<name>`): the machine's, like pip's and npm's own
    caches, so a fresh clone (CI's included) finds it installed instead of paying minutes of npm
    or pip again. Each install stamps its pinned version, so checkouts pinning another version
    install beside or over it. `other_users`: another user runs what is installed there (as root,
    Paperclip's embedded Postgres runs as `postgres`), and root's home is private, so root's copy
    goes to `/var/cache/svc/<name>`."""
    if chosen:
        return Path(chosen)
    if other_users and os.geteuid() == 0 and not os.environ.get("XDG_CACHE_HOME"):
        return Path("/var/cache/svc") / name
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "svc" / name


@contextlib.contextmanager
def one_installer(cache: Path) -> Iterator[None]:
    """Hold the cache's install lock (blocking until another process's install ends)."""
    with hold(cache / ".lock"):
        yield


def hold(lock_path: Path) -> TextIO:
    """An exclusive lock on `lock_path`, taken when its holder lets go; closing the returned
    file releases it (so does the holder's exit, however it ends)."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = open(lock_path, "w")  # held open until the caller closes it
    fcntl.flock(lock, fcntl.LOCK_EX)
    return lock
