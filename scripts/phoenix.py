"""A real Arize Phoenix on this machine: pinned from PyPI into its own virtual environment, running.

Used by the live trace test (tests/test_phoenix_live.py) and by hand:

    python scripts/phoenix.py install     # a venv with arize-phoenix in ~/.cache/svc/phoenix (once)
    python scripts/phoenix.py up          # start it; prints its UI and OTLP endpoint

Phoenix has its own pins (web framework, database drivers, its own OpenTelemetry), so it lives
in a virtual environment of its own, apart from the service's: `venv-<version>` under
`$SVC_PHOENIX_CACHE`, by default `~/.cache/svc/phoenix` (the machine's, so every checkout and
CI's fresh clone reuse it). A second install is a no-op.
`up` (and `Phoenix.start`) runs it on free loopback ports with its working directory (SQLite) in
the cache, telemetry off, until stopped; traces go to its OTLP/HTTP receiver at `<base>/v1/traces`
and are read back from its REST API (`GET /v1/projects/{project}/spans`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import venv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    from scripts.install_lock import machine_cache, one_installer
except ModuleNotFoundError:  # run as `python scripts/<name>.py`
    from install_lock import machine_cache, one_installer  # type: ignore[no-redef]

PHOENIX_VERSION = "20.26.1"
REPO = Path(__file__).resolve().parent.parent
# The environment is the machine's (every checkout and CI's fresh clone share it: installing it
# takes minutes); the data is the checkout's (its ignored .cache/).
CACHE = machine_cache("phoenix", os.environ.get("SVC_PHOENIX_CACHE"))
DATA = REPO / ".cache" / "phoenix" / "data"
START_TIMEOUT_S = 300.0  # its imports alone take a minute on a busy 2-core machine
STOP_TIMEOUT_S = 20.0


class PhoenixUnavailable(RuntimeError):
    """Phoenix cannot be installed or started here (the message says why, in one line)."""


def environment() -> Path:
    """The pinned version's virtual environment."""
    return CACHE / f"venv-{PHOENIX_VERSION}"


def python() -> Path:
    """The Phoenix environment's interpreter."""
    return environment() / "bin" / "python"


def install() -> None:
    """arize-phoenix (pinned) into its own venv in the cache; a no-op when already there. One
    installer at a time on a machine (a lock file), the others wait for it."""
    stamp = environment() / ".installed"
    if stamp.exists() and stamp.read_text() == PHOENIX_VERSION:
        return
    with one_installer(CACHE):
        if not (stamp.exists() and stamp.read_text() == PHOENIX_VERSION):
            _install(stamp)


def _install(stamp: Path) -> None:
    if not python().exists():
        venv.create(environment(), with_pip=True)
    with tempfile.TemporaryFile(mode="w+") as out:
        code = subprocess.call(
            [str(python()), "-m", "pip", "install", "--quiet", f"arize-phoenix=={PHOENIX_VERSION}"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        if code != 0:
            out.seek(0)
            raise PhoenixUnavailable(f"pip install arize-phoenix failed (exit {code}): {out.read()[-400:]}")
    stamp.write_text(PHOENIX_VERSION)


def free_port() -> int:
    """A free loopback TCP port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(url: str, timeout: float = 10.0) -> Any:
    """GET a JSON document."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


@dataclass
class Phoenix:
    """One Phoenix server in a working directory of its own, in its own process group."""

    port: int = 0
    work_dir: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def otlp_endpoint(self) -> str:
        """OTEL_EXPORTER_OTLP_ENDPOINT for the service (traces go to /v1/traces under it)."""
        return self.base_url

    def start(self) -> str:
        """Start and wait until it answers; its base URL."""
        install()
        # One working directory kept in the cache: its database is migrated once (a fresh one
        # costs a start-up its migrations); readers ask for their own trace ids.
        self.work_dir = DATA
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_", "SVC_", "PYTHON"))
        }
        env.update(
            {
                "PHOENIX_WORKING_DIR": str(self.work_dir),
                "PHOENIX_HOST": "127.0.0.1",
                "PHOENIX_PORT": str(self.port),
                "PHOENIX_GRPC_PORT": str(free_port()),  # never the shared default 4317
                "PHOENIX_TELEMETRY_ENABLED": "false",
                "DO_NOT_TRACK": "1",
            }
        )
        self.log_path = self.work_dir / "server.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [str(python()), "-m", "phoenix.server.main", "serve"],
                env=env,
                cwd=self.work_dir,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise PhoenixUnavailable(f"Phoenix exited during start-up: {self.log_tail()}")
            try:
                get(f"{self.base_url}/v1/projects")
                return self.base_url
            except (OSError, ValueError):
                time.sleep(0.3)
        self.stop()
        raise PhoenixUnavailable(f"Phoenix did not answer within {START_TIMEOUT_S:.0f} s")

    def spans(self, project: str = "default", limit: int = 1000) -> list[dict[str, Any]]:
        """Every span of a project, from Phoenix's REST API (newest first, all pages)."""
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            query = {"limit": str(limit), **({"cursor": cursor} if cursor else {})}
            page = get(f"{self.base_url}/v1/projects/{project}/spans?{urllib.parse.urlencode(query)}")
            found += page.get("data") or []
            cursor = page.get("next_cursor")
            if not cursor:
                return found

    def trace(self, trace_id: str, project: str = "default") -> list[dict[str, Any]]:
        """The spans of one trace, from Phoenix's REST API (all pages)."""
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            query = {"trace_id": trace_id, "limit": "500", **({"cursor": cursor} if cursor else {})}
            page = get(f"{self.base_url}/v1/projects/{project}/spans?{urllib.parse.urlencode(query)}")
            found += page.get("data") or []
            cursor = page.get("next_cursor")
            if not cursor:
                return found

    def default_project_id(self) -> str:
        """The id of the project spans land in by default (its UI links name the id)."""
        projects = get(f"{self.base_url}/v1/projects").get("data") or []
        return str(next(p["id"] for p in projects if p["name"] == "default"))

    def log_tail(self) -> str:
        """The end of the server log (for failures)."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-1500:]

    def stop(self) -> None:
        """Stop the server (SIGTERM to its group, SIGKILL if it lingers)."""
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=STOP_TIMEOUT_S)
            self.process = None


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install", help="install Phoenix into the cache")
    up = sub.add_parser("up", help="run Phoenix until interrupted")
    up.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    try:
        install()
        if args.command == "install":
            print(f"Phoenix {PHOENIX_VERSION} is in {environment()}")
            return 0
        server = Phoenix(port=args.port)
        server.start()
        print(f"Phoenix {PHOENIX_VERSION} at {server.base_url}")
        print(f"OTEL_EXPORTER_OTLP_ENDPOINT={server.otlp_endpoint}")
        print(f"SVC_TRACE_URL={server.base_url}/projects/<project id>/traces/{{traceId}}")
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()
    except PhoenixUnavailable as exc:
        print(f"phoenix: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
