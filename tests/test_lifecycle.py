"""`svc serve` stops everything it started, however it is stopped, and its command line.

Each service runs as a real `svc serve` subprocess with a marker of its own in
its environment, which every process it starts inherits (the embedded
database, a local Ray's GCS, raylet, agents and workers); after the stop, no
marked process may remain within 10 s. Two cases start a local Ray (the
expensive part); the others join the session's Ray, which keeps the file fast
while still covering every signal with and without the data directory.
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import select
import shutil
import signal
import socket
import sys
import time
from pathlib import Path

import pytest

from actors.deployment import SECRETS_DIR
from svc.core.vault import DEV_KEY_FILE
from svc.subprocesses.embedded_db import STATE_FILE, EmbeddedMongo
from svc.subprocesses.embedded_db_child import SERVER_LOCK
from svc.subprocesses.process_finder import alive, marked_processes
from tests.support.serve import EXIT_TIMEOUT_S, LEFTOVER_TIMEOUT_S, START_TIMEOUT_S, SVC, Service
from tests.support.waiting import wait_until


def assert_database_running(data_dir: Path) -> int:
    """The embedded database's pid, from its state file, alive."""
    pid = int(json.loads((data_dir / STATE_FILE).read_text())["pid"])
    assert alive(pid)
    return pid


@pytest.mark.parametrize(
    ("how", "keep_dir", "local_ray"),
    [
        (signal.SIGTERM, True, True),
        (signal.SIGKILL, False, True),
        (signal.SIGINT, True, False),
        (signal.SIGKILL, True, False),
        (signal.SIGTERM, False, False),
        (signal.SIGINT, False, False),
    ],
    ids=[
        "SIGTERM-local-ray",
        "SIGKILL-no-dir-local-ray",
        "SIGINT",
        "SIGKILL",
        "SIGTERM-no-dir",
        "SIGINT-no-dir",
    ],
)
async def test_nothing_outlives_the_service(tmp_path, secret_key, ray_session, how, keep_dir, local_ray):
    data_dir = tmp_path / "data"
    service = Service(data_dir, secret_key, local_ray=local_ray)
    try:
        await service.start()
        assert_database_running(data_dir)
        before = marked_processes(service.marker)
        if local_ray:
            assert any("raylet" in info.command for info in before), "a local Ray was started"
        assert len(list((data_dir / SECRETS_DIR).glob("*.json"))) == 1, "the actors' secrets, for this Ray"
        if not keep_dir:
            shutil.rmtree(data_dir)
        code = await service.stop(how)
        left = await service.leftovers()
        assert left == [], f"left running after {how.name}: {left}"
        if how is signal.SIGKILL:
            assert code == -signal.SIGKILL
            return
        assert code == 0, service.stderr.decode()[-2000:]
        logged = service.stderr.decode()
        steps = ("stopped accepting; in-flight requests ended", "domain services", "Ray", "database", "done")
        for step in steps:
            assert f"shut-down: {step}" in logged, step
        assert logged.index("shut-down: domain services") < logged.index("shut-down: Ray")
        assert logged.index("shut-down: Ray") < logged.index("shut-down: database")
        if keep_dir:
            assert not (data_dir / STATE_FILE).exists(), "the database's state file is removed"
            # The actors' secret file goes with the local Ray it was for (actors/deployment.py); a Ray
            # this process only joined keeps it, for the processes and actors still using it.
            left_secrets = list((data_dir / SECRETS_DIR).glob("*.json"))
            assert left_secrets == [] if local_ray else len(left_secrets) == 1
    finally:
        service.kill()


async def test_a_port_in_use_fails_before_anything_starts(tmp_path, secret_key):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "SVC_DATA_DIR": str(tmp_path / "data"), "SVC_SECRET_KEYS": secret_key}
        env.pop("SVC_MONGODB_URI", None)
        process = await asyncio.create_subprocess_exec(
            SVC,
            "serve",
            "--port",
            str(port),
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await asyncio.wait_for(process.communicate(), EXIT_TIMEOUT_S)
    assert process.returncode == 1
    assert stdout == b""
    assert stderr.decode() == f"error: cannot listen on 127.0.0.1:{port}: address already in use\n"
    assert not (tmp_path / "data").exists(), "neither the database nor the vault was started"


async def test_a_failed_start_up_stops_what_it_had_started(tmp_path, ray_session):
    # The database starts, then the vault refuses the development key kept in the data dir (a
    # setting would be refused before anything starts): the database must be stopped again.
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / DEV_KEY_FILE).write_text("not-a-fernet-key\n")
    service = Service(tmp_path / "data", "", local_ray=False)
    try:
        assert service.process is None
        service.process = await asyncio.create_subprocess_exec(
            SVC,
            "serve",
            "--port",
            "0",
            env=service.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await asyncio.wait_for(service.process.communicate(), EXIT_TIMEOUT_S)
        assert service.process.returncode == 1
        assert stdout == b""
        last = stderr.decode().strip().splitlines()[-1]
        assert last.startswith("error: start-up failed: "), last
        assert "not-a-fernet-key" not in stderr.decode(), "a secret never reaches the output"
        assert (tmp_path / "data" / "mongo").is_dir(), "the database had been started"
        assert not (tmp_path / "data" / STATE_FILE).exists()
        assert await service.leftovers() == []
    finally:
        service.kill()


async def test_version_and_help():
    process = await asyncio.create_subprocess_exec(SVC, "--version", stdout=asyncio.subprocess.PIPE)
    stdout, _ = await asyncio.wait_for(process.communicate(), EXIT_TIMEOUT_S)
    assert process.returncode == 0
    assert stdout.decode().startswith("svc 0.")
    process = await asyncio.create_subprocess_exec(SVC, "--help", stdout=asyncio.subprocess.PIPE)
    stdout, _ = await asyncio.wait_for(process.communicate(), EXIT_TIMEOUT_S)
    for command in ("serve", "users", "orgs", "runs", "doctor"):
        assert command in stdout.decode()


def _on_terminal(argv: list[str], env: dict[str, str], answers: list[bytes]) -> tuple[int, str]:
    """Run argv with a pseudo-terminal as its controlling terminal, typing `answers` at each prompt."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the pty is its controlling terminal
        os.execve(argv[0], argv, env)  # noqa: S606 - a fixed program, no shell
    output = b""
    answered_at = 0  # answer only a prompt written after the previous answer
    pending = list(answers)
    deadline = time.monotonic() + EXIT_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if not ready:
                continue
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            output += chunk
            if pending and output[answered_at:].rstrip().endswith(b":"):
                os.write(fd, pending.pop(0) + b"\n")
                answered_at = len(output)
        else:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace")


async def test_users_create_prompts_for_the_password(db_uri, secret_key, tmp_path, store):
    env = {
        **os.environ,
        "SVC_MONGODB_URI": db_uri,
        "SVC_SECRET_KEYS": secret_key,
        "SVC_DATA_DIR": str(tmp_path / "cli"),
    }
    argv = [SVC, "users", "create", "--email", "prompted@example.com"]
    typed = [b"prompted secret 1", b"prompted secret 1"]
    code, output = await asyncio.to_thread(_on_terminal, argv, env, typed)
    assert code == 0, output
    assert "Password:" in output and "Repeat password:" in output
    assert "prompted secret 1" not in output, "the password is not echoed"
    assert await store.users.find_one({"email": "prompted@example.com"}) is not None

    argv = [SVC, "users", "create", "--email", "mismatch@example.com"]
    code, output = await asyncio.to_thread(_on_terminal, argv, env, [b"first password", b"second password"])
    assert code == 1
    assert "error: the passwords do not match" in output
    assert await store.users.find_one({"email": "mismatch@example.com"}) is None


async def test_users_create_without_a_terminal_needs_the_password(db_uri, secret_key, tmp_path):
    env = {**os.environ, "SVC_MONGODB_URI": db_uri, "SVC_SECRET_KEYS": secret_key}
    process = await asyncio.create_subprocess_exec(
        SVC,
        "users",
        "create",
        "--email",
        "nopass@example.com",
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), EXIT_TIMEOUT_S)
    assert process.returncode == 1
    assert stdout == b""
    assert stderr.decode().startswith("error: --password is required when stdin is not a terminal")


async def test_the_last_user_out_stops_the_shared_database(tmp_path):
    first, second = EmbeddedMongo(tmp_path), EmbeddedMongo(tmp_path)
    try:
        await first.start()
        await second.start()
        pid = first.pid
        assert pid is not None and second.pid == pid
        await first.stop()  # the starter leaves first: the other user still needs the server
        assert alive(pid)
        await second.stop()
        assert not alive(pid)
        assert not (tmp_path / STATE_FILE).exists()
    finally:
        await first.stop()
        await second.stop()


async def test_the_database_stops_when_its_killed_users_are_gone(tmp_path):
    """A user killed with SIGKILL releases its hold; the server's watchdog notices and stops."""
    data_dir = tmp_path / "data"
    script = (
        "import asyncio, sys; from pathlib import Path\n"
        "from svc.subprocesses.embedded_db import EmbeddedMongo\n"
        "async def main():\n"
        # The user keeps its EmbeddedMongo: a dropped one closes its lock files, the user's hold
        # with them, and the watchdog would stop the server before the kill this test is about.
        "    database = EmbeddedMongo(Path(sys.argv[1]))\n"
        "    await database.start()\n"
        "    print('up', flush=True)\n"
        "    await asyncio.sleep(600)\n"
        "    await database.stop()\n"
        "asyncio.run(main())\n"
    )
    user = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, str(data_dir), stdout=asyncio.subprocess.PIPE
    )
    try:
        assert user.stdout is not None
        assert await asyncio.wait_for(user.stdout.readline(), START_TIMEOUT_S) == b"up\n"
        pid = assert_database_running(data_dir)
        shutil.rmtree(data_dir)  # even with its data directory gone
        user.kill()
        await user.wait()
        assert await wait_until(lambda: not alive(pid), LEFTOVER_TIMEOUT_S), (
            "the database outlived its only user"
        )
    finally:
        if user.returncode is None:
            user.kill()
            await user.wait()


async def test_a_stale_state_file_naming_a_live_process_is_replaced(tmp_path):
    """A killed run's state file may name a pid and a port now used by others: not joined."""
    with socket.socket() as stranger:
        stranger.bind(("127.0.0.1", 0))
        stranger.listen()
        port = stranger.getsockname()[1]
        (tmp_path / STATE_FILE).write_text(json.dumps({"pid": os.getpid(), "port": port}))
        (tmp_path / SERVER_LOCK).touch()  # left behind, unlocked, as a killed server leaves it
        server = EmbeddedMongo(tmp_path)
        try:
            await server.start()
            assert server.owned and server.port != port
            assert json.loads((tmp_path / STATE_FILE).read_text())["pid"] == server.pid
        finally:
            await server.stop()


async def test_the_session_check_fails_a_run_that_leaves_a_process(tmp_path):
    """An inner pytest session whose test starts a process and forgets it: the run fails, and the
    process is listed and killed."""
    (tmp_path / "test_leak.py").write_text(
        "import subprocess, sys\n"
        "def test_forgets_a_child():\n"
        "    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "    print(f'child {child.pid}')\n"
    )
    root = Path(__file__).resolve().parent.parent
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "tests.leftovers",
        "-p",
        "no:cacheprovider",
        "-o",
        "leftover_grace_seconds=0.5",
        "-s",
        "--rootdir",
        str(tmp_path),
        str(tmp_path / "test_leak.py"),
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    stdout, _ = await asyncio.wait_for(process.communicate(), EXIT_TIMEOUT_S)
    output = stdout.decode()
    assert process.returncode == 1, output
    assert "1 passed" in output
    assert "processes left running" in output and "time.sleep(120)" in output
    child = int(output.split("child ", 1)[1].split()[0])
    assert not alive(child), "the check kills what it reports"
