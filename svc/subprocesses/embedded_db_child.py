"""The embedded database process: SecantusDB plus a watchdog that ends it with its last user.

Run by `svc.subprocesses.embedded_db` as a script (`python -P embedded_db_child.py DATA_DIR
ARGS...`), so it imports only the standard library and SecantusDB, not the service.

Every process that uses the server (the one that started it and any that joined
it) holds a shared lock on `<data_dir>/mongo.users` while it does. The kernel
drops a process's locks when it exits, however it exits (SIGKILL included), so
the watchdog here learns that the last user is gone by taking that lock
exclusively; it then stops the server (SIGTERM to itself, which SecantusDB
handles by closing its storage) and, should that stall (as it can once the data
directory has been deleted), exits hard after a bounded wait. The server also
holds `<data_dir>/mongo.server` exclusively for its whole life, which tells a
later start whether a state file is stale.

The lock files are opened once at start-up, so the watchdog keeps working when
the data directory is deleted under it.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

START_LOCK = "mongo.lock"
USERS_LOCK = "mongo.users"
SERVER_LOCK = "mongo.server"
STATE_FILE = "mongo.json"
POLL_S = 0.2
STOP_GRACE_S = 4.0


def _try_lock(handle: IO[str]) -> bool:
    """Take an exclusive lock without waiting; False when someone holds it."""
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _remove_state(data_dir: Path) -> None:
    """Remove the state file if it still names this process (a new server may have replaced it)."""
    state = data_dir / STATE_FILE
    try:
        if json.loads(state.read_text()).get("pid") == os.getpid():
            state.unlink()
    except (OSError, ValueError, AttributeError):
        pass


def watch(data_dir: Path, start_lock: IO[str], users_lock: IO[str]) -> None:
    """Wait until no user holds the users lock, then stop the server (hard after STOP_GRACE_S)."""
    while True:
        time.sleep(POLL_S)
        # Users take the start lock to join or leave, so holding it makes "no user" final.
        if not _try_lock(start_lock):
            continue
        if _try_lock(users_lock):
            break
        fcntl.flock(start_lock, fcntl.LOCK_UN)
    # Both locks stay held until this process exits: nobody joins a server that is stopping,
    # and a new server on the same storage waits for this one to let go of it.
    _remove_state(data_dir)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(STOP_GRACE_S)
    os._exit(1)


def prune_retryable_in_order(registry: Any) -> None:
    """SecantusDB's retryable-write records, pruned from the oldest end (a drop-in for its
    `TransactionRegistry._prune_retryable_locked`, called under the registry's lock).

    Its own prune runs on every write, scans every record (kept 30 minutes) and, past its cap
    of 10,000, sorts them all: a write then costs five times as much, for every client
    (bench/embedded_writes.py: 4.5 ms instead of 0.85 on the development machine). Records
    are inserted in time order (a key is recorded once: a retry with it is answered from the
    record), and a dict keeps insertion order, so the stale and the excess are at the front:
    the same records go, in O(1) per write. Were a key ever recorded again out of order, a
    stale record behind it would wait for it (the cap still holds).
    """
    from secantus import transactions

    records = registry._retryable
    cutoff = registry._time() - transactions._RETRYABLE_RECORD_LIFETIME_SECONDS
    excess = len(records) - transactions._RETRYABLE_RECORD_MAX
    while records:
        oldest = next(iter(records))
        if excess <= 0 and records[oldest][1] >= cutoff:
            return
        del records[oldest]
        excess -= 1


def _install_prune() -> None:
    """Use `prune_retryable_in_order` when SecantusDB has the prune it replaces."""
    from secantus.transactions import TransactionRegistry

    if callable(getattr(TransactionRegistry, "_prune_retryable_locked", None)):
        TransactionRegistry._prune_retryable_locked = prune_retryable_in_order


def main(argv: list[str]) -> int:
    """Lock, start the watchdog, then run SecantusDB's own command line with the remaining arguments."""
    data_dir = Path(argv[0])
    server_lock = open(data_dir / SERVER_LOCK, "a")
    if not _try_lock(server_lock):
        print(f"another embedded database already serves {data_dir}", file=sys.stderr)
        return 3
    start_lock = open(data_dir / START_LOCK, "a")
    users_lock = open(data_dir / USERS_LOCK, "a")
    threading.Thread(target=watch, args=(data_dir, start_lock, users_lock), daemon=True).start()

    _install_prune()
    from secantus.cli import main as secantus_main

    return secantus_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
