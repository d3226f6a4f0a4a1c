"""The processes the service starts beside itself, and ends however it ends: the embedded database
(`embedded_db.py`, which starts or joins `embedded_db_child.py` run as a script), the reaper of a
local Ray's processes (`ray_reaper.py`, also run as a script) and the helpers that find the
processes a service or a test session started (`process_finder.py`).

Process control, not domain: it imports only the standard library (and SecantusDB in the child),
so it sits beside `svc.core` and no capability package imports it; the API, the CLI and the actors
do (docs/lifecycle.md, docs/storage.md)."""

from svc.subprocesses.embedded_db import EmbeddedMongo, NoDatabaseError, require_database
from svc.subprocesses.ray_reaper import Reaper

__all__ = ["EmbeddedMongo", "NoDatabaseError", "Reaper", "require_database"]
