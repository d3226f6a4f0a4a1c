"""Real MCP servers that others wrote, installed from the package registries into the machine's
cache (`~/.cache/svc/mcp`, scripts/install_lock.py).

Used by the live MCP tests (tests/test_mcp_live.py), the bench (bench/mcp.py) and by hand:

    python scripts/mcp_servers.py install      # both, pinned (a no-op once installed)
    python scripts/mcp_servers.py everything   # run server-everything over streamable HTTP

- `mcp-server-time` (PyPI, the reference time server, stdio) in a virtual environment of its
  own, since it brings its own SDK: the service names it in its MCP catalogue.
- `@modelcontextprotocol/server-everything` (npm, the protocol's test server), served over
  streamable HTTP on a port of our choosing.

A second install, from this checkout or a fresh clone, is a no-op (a stamp names the pinned
version), so CI pays the download once per machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    from scripts.install_lock import machine_cache, one_installer
except ModuleNotFoundError:  # run as `python scripts/<name>.py`
    from install_lock import machine_cache, one_installer  # type: ignore[no-redef]

TIME_VERSION = "2026.10.19"
EVERYTHING_VERSION = "2026.8.31"
# The machine's, shared by every checkout: a fresh clone does not install them again.
CACHE = machine_cache("mcp", os.environ.get("SVC_MCP_CACHE"))


class McpServerUnavailable(RuntimeError):
    """A server cannot be installed or started here (the message says why, in one line)."""


def _run(cmd: list[str], cwd: Path | None = None) -> None:
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(mode="w+") as out:
        code = subprocess.call(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)  # noqa: S603
        if code != 0:
            out.seek(0)
            tail = out.read()[-400:].strip()
            raise McpServerUnavailable(f"{' '.join(cmd[:3])} failed (exit {code}): {tail}")


def time_server() -> Path:
    """The `mcp-server-time` executable, installed (pinned) into its own virtual environment."""
    venv = CACHE / "time"
    executable = venv / "bin" / "mcp-server-time"
    stamp = venv / ".installed"
    with one_installer(CACHE):
        if not (stamp.exists() and stamp.read_text() == TIME_VERSION and executable.exists()):
            _install_time_server(venv, stamp)
    return executable


def _install_time_server(venv: Path, stamp: Path) -> None:
    if venv.exists():
        shutil.rmtree(venv)
    _run([sys.executable, "-m", "venv", str(venv)])
    _run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", f"mcp-server-time=={TIME_VERSION}"]
    )
    stamp.write_text(TIME_VERSION)


def everything_entry() -> Path:
    """server-everything's entry script, installed (pinned) from npm."""
    prefix = CACHE / "everything"
    entry = prefix / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
    stamp = prefix / ".installed"
    with one_installer(CACHE):
        if not (stamp.exists() and stamp.read_text() == EVERYTHING_VERSION and entry.exists()):
            if shutil.which("npm") is None:
                raise McpServerUnavailable("npm is not installed, so server-everything cannot be fetched")
            prefix.mkdir(parents=True, exist_ok=True)
            package = f"@modelcontextprotocol/server-everything@{EVERYTHING_VERSION}"
            _run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(prefix), package])
            stamp.write_text(EVERYTHING_VERSION)
    return entry


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    """Until the port accepts a connection (the server is up), or the process ends."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise McpServerUnavailable(f"the server exited with status {process.returncode}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise McpServerUnavailable(f"the server did not listen on port {port} within {timeout_s:g} s")


def start_everything(port: int | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """server-everything over streamable HTTP; the process and the MCP endpoint's URL."""
    entry = everything_entry()
    node = shutil.which("node")
    if node is None:
        raise McpServerUnavailable("node is not installed")
    port = port or free_port()
    env = {**os.environ, "PORT": str(port)}
    process = subprocess.Popen(  # noqa: S603
        [node, str(entry), "streamableHttp"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for_port(port, process)
    except BaseException:
        process.kill()
        raise
    return process, f"http://127.0.0.1:{port}/mcp"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["install", "everything"])
    options = parser.parse_args()
    if options.command == "install":
        print(time_server())
        print(everything_entry())
        return
    process, url = start_everything()
    print(url, flush=True)
    try:
        process.wait()
    except KeyboardInterrupt:
        process.terminate()


if __name__ == "__main__":
    main()
