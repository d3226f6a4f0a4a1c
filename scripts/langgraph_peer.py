"""LangGraph's own API server on this machine, the peer of bench/peer.py: pinned, in-memory runtime.

    python scripts/langgraph_peer.py install        # a venv with langgraph-api into .cache/peer (once)
    python scripts/langgraph_peer.py up --model-url http://127.0.0.1:9000/v1 --model-key sk-...
                                                    # start `langgraph dev`, print its base URL

Everything lands in the ignored `.cache/peer/`: a second install is a no-op. The server is
`langgraph dev --no-browser --no-reload` (langgraph-cli's in-memory runtime,
langgraph-runtime-inmem) serving one graph, scripts/langgraph_peer_graph.py: one node, one
chat-completions call to the model at PEER_MODEL_URL. Each start gets a fresh working directory
(the in-memory runtime pickles its state there), so a new server has no threads and no runs.
Logs are JSON lines in that directory; `pickups` reads from them when each run was picked up
by the server's queue (its in-memory queue polls every 0.5 s: bench/peer.py takes that out).
Analytics, version checks and LangSmith tracing are off.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

try:
    from scripts.install_lock import one_installer
except ModuleNotFoundError:  # run as `python scripts/<name>.py`
    from install_lock import one_installer  # type: ignore[no-redef]
from svc.subprocesses.embedded_db import free_port

# langgraph-api 0.16.7 is the version of the first comparison (issue 38); the others are what
# pip resolved with it, pinned so that a second machine serves the same code.
PINS = (
    "langgraph-api==0.16.7",
    "langgraph-runtime-inmem==0.36.7",
    "langgraph-cli[inmem]==0.4.40",
    "langgraph==1.2.24",
    "langchain-core==1.8.3",
    "langchain-openai==1.7.4",
)
REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("SVC_PEER_CACHE", REPO / ".cache" / "peer"))
GRAPH = Path(__file__).resolve().with_name("langgraph_peer_graph.py")
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0


class PeerUnavailable(RuntimeError):
    """The peer cannot be installed or started here (the message says why, in one line)."""


def venv() -> Path:
    return CACHE / "venv"


def _run(cmd: list[str]) -> None:
    """Run a setup command; its output is shown (tail) only on failure."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(mode="w+") as out:
        code = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT)
        if code != 0:
            out.seek(0)
            raise PeerUnavailable(f"{' '.join(cmd[:4])} failed (exit {code}): {out.read()[-400:].strip()}")


def install() -> None:
    """The pinned peer into its own venv (this Python, 3.11+ as langgraph-api needs); a no-op when there."""
    stamp = venv() / ".installed"
    with one_installer(CACHE):
        if stamp.exists() and stamp.read_text() == "\n".join(PINS):
            return
        if not (venv() / "bin" / "python").exists():
            _run([sys.executable, "-m", "venv", str(venv())])
            _run([str(venv() / "bin" / "python"), "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
        _run([str(venv() / "bin" / "python"), "-m", "pip", "install", "--quiet", *PINS])
        stamp.write_text("\n".join(PINS))


@dataclass
class Pickup:
    """When the peer's queue picked a run up (wall clock), and how long it had waited for it."""

    started_at: float
    queue_s: float


@dataclass
class LangGraphPeer:
    """One `langgraph dev` server in a fresh working directory and its own process group."""

    model_url: str
    model_key: str
    jobs: int = 128  # concurrent runs per worker (`--n-jobs-per-worker`); its default is 10
    port: int = 0
    work_dir: Path | None = None
    process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        assert self.work_dir is not None
        return self.work_dir / "server.log"

    def launch(self) -> str:
        """Start the server (installing the peer first if needed); its base URL, not yet ready."""
        install()
        runs = CACHE / "runs"
        runs.mkdir(parents=True, exist_ok=True)
        self.work_dir = Path(tempfile.mkdtemp(prefix="lg-", dir=runs))
        shutil.copy(GRAPH, self.work_dir / "graph.py")
        config = {"dependencies": ["."], "graphs": {"lead": "./graph.py:graph"}}
        (self.work_dir / "langgraph.json").write_text(json.dumps(config))
        self.port = self.port or free_port()
        env = {
            **os.environ,
            "PEER_MODEL_URL": self.model_url,
            "PEER_MODEL_KEY": self.model_key,
            "LOG_JSON": "true",
            "LOG_COLOR": "false",
            "PYTHONUNBUFFERED": "1",
            "LANGGRAPH_CLI_NO_ANALYTICS": "1",
            "LANGGRAPH_NO_VERSION_CHECK": "true",
            "LANGSMITH_TRACING": "false",
            "LANGCHAIN_TRACING_V2": "false",
        }
        command = [
            str(venv() / "bin" / "langgraph"), "dev", "--no-browser", "--no-reload",
            "--host", "127.0.0.1", "--port", str(self.port),
            "--n-jobs-per-worker", str(self.jobs), "--server-log-level", "INFO",
        ]  # fmt: skip
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command,
                cwd=self.work_dir,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self.base_url

    def wait_ready(self) -> None:
        """Block until `GET /ok` answers (for the command line; the bench polls it without blocking)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise PeerUnavailable(f"langgraph dev exited: {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/ok", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise PeerUnavailable(f"langgraph dev did not come up: {self.log_tail()}")

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-600:].strip()
        except OSError:
            return "(no log)"

    def pickups(self) -> dict[str, Pickup]:
        """Run id -> when the queue started it, from the server's "Starting background run" lines."""
        found: dict[str, Pickup] = {}
        for line in self.log_path.read_text(errors="replace").splitlines():
            if "Starting background run" not in line:
                continue
            try:
                entry = json.loads(line)
                started = datetime.fromisoformat(entry["run_started_at"]).timestamp()
                found[str(entry["run_id"])] = Pickup(started, float(entry["run_queue_ms"]) / 1000)
            except (ValueError, KeyError, TypeError):
                continue
        return found

    def stop(self) -> None:
        """Stop the server's process group and remove its working directory."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install", help="install the pinned peer into .cache/peer (once)")
    up = sub.add_parser("up", help="start `langgraph dev`, print its base URL, run until interrupted")
    up.add_argument("--model-url", required=True, help="an OpenAI-compatible base URL (with /v1)")
    up.add_argument("--model-key", required=True)
    up.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    try:
        if args.command == "install":
            install()
            print(f"installed: {', '.join(PINS)} in {venv()}")
            return
        peer = LangGraphPeer(args.model_url, args.model_key, port=args.port)
        try:
            peer.launch()
            peer.wait_ready()
            print(peer.base_url, flush=True)
            while peer.process is not None and peer.process.poll() is None:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
        finally:
            peer.stop()
    except PeerUnavailable as exc:
        sys.exit(f"peer unavailable: {exc}")


if __name__ == "__main__":
    main()
