"""The embedded database: started when no URI is set, durable, shared, never orphaned."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from api.app import create_app
from config.settings import Settings
from svc.core.store import INDEXES_MARKER, SCHEMA, Store, indexes_digest
from svc.subprocesses.embedded_db import STATE_FILE, EmbeddedMongo, free_port, uri_for
from tests.support.accounts import signup
from tests.support.waiting import wait_until

SVC = str(Path(sys.executable).with_name("svc"))


def embedded_settings(data_dir: Path, secret_key: str) -> Settings:
    """Settings with no MongoDB URI: the app starts its own embedded server."""
    return Settings.from_env({}, data_dir=data_dir, secret_keys=(secret_key,), scheduler_enabled=False)


async def test_restart_keeps_data(tmp_path, secret_key, ray_session):
    data_dir = tmp_path / "data"
    async with TestClient(TestServer(create_app(embedded_settings(data_dir, secret_key)))) as client:
        caller = await signup(client, email="durable@example.com")
        assert (data_dir / STATE_FILE).exists()
    assert not (data_dir / STATE_FILE).exists(), "the owner removes the state file when it stops"
    async with TestClient(TestServer(create_app(embedded_settings(data_dir, secret_key)))) as client:
        response = await client.post(
            "/api/auth/login", json={"email": "durable@example.com", "password": caller.password}
        )
        assert response.status == 200
        assert (await response.json())["user"]["id"] == caller.id


async def test_a_second_process_joins_the_running_server(tmp_path):
    owner = EmbeddedMongo(tmp_path)
    joiner = EmbeddedMongo(tmp_path)
    try:
        uri = await owner.start()
        assert await joiner.start() == uri
        assert owner.owned and not joiner.owned
        await joiner.stop()
        assert owner.process is not None and owner.process.poll() is None, "a joiner never stops it"
    finally:
        await owner.stop()


async def test_a_stale_state_file_is_ignored(tmp_path):
    (tmp_path / STATE_FILE).write_text('{"pid": 999999, "port": 1}')
    server = EmbeddedMongo(tmp_path)
    try:
        await server.start()
        assert server.owned and server.port != 1
    finally:
        await server.stop()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has exited; it only waits for its (dead) parent's reaping.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux-only")
async def test_embedded_server_dies_with_a_killed_api(tmp_path, secret_key):
    port = free_port()
    env = {
        **os.environ,
        "SVC_DATA_DIR": str(tmp_path),
        "SVC_SECRET_KEYS": secret_key,
        "SVC_RATE_LIMITS": "off",
    }
    env.pop("SVC_MONGODB_URI", None)
    api = subprocess.Popen(
        [SVC, "serve", "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        state = tmp_path / STATE_FILE
        assert await wait_until(state.exists, 120), "the API never started its database"
        db_pid = json.loads(state.read_text())["pid"]
        assert _alive(db_pid)
    finally:
        api.send_signal(signal.SIGKILL)
        api.wait()
    assert await wait_until(lambda: not _alive(db_pid), 60), "database outlived the API"


async def test_indexes_are_created_at_start_up(client, store):
    sessions = await store.sessions.index_information()
    assert any(info.get("expireAfterSeconds") == 0 for info in sessions.values()), "TTL on sessions"
    keys = await store.api_keys.index_information()
    assert any(info.get("unique") and info["key"] == [("keyHash", 1)] for info in keys.values())
    templates = await store["templates"].index_information()
    assert any(info.get("unique") and info["key"] == [("slug", 1)] for info in templates.values())
    users = await store.users.index_information()
    assert any(info.get("unique") and info["key"] == [("handle", 1)] for info in users.values())


async def test_a_start_skips_the_indexes_it_recorded_and_creates_them_when_the_table_changes(mongo_port):
    store = Store.connect(uri_for(mongo_port, f"t_{uuid.uuid4().hex[:16]}"))  # not a pooled one
    try:
        await store.ensure_indexes()
        marker = await store.db[SCHEMA].find_one({"_id": INDEXES_MARKER})
        assert marker is not None and marker["digest"] == indexes_digest()
        await store.api_keys.drop_index("keyHash_1")
        await store.ensure_indexes()  # the same table: recorded, so nothing is created
        assert "keyHash_1" not in await store.api_keys.index_information()
        # A release whose table differs (here: the record of an older one) creates every index,
        # and drops those it retired: an index an older release made costs every write.
        await store["pipeline_runs"].create_index([("status", 1), ("source", 1)])
        await store.db[SCHEMA].update_one({"_id": INDEXES_MARKER}, {"$set": {"digest": "an older table"}})
        await store.ensure_indexes()
        assert "keyHash_1" in await store.api_keys.index_information()
        runs = await store["pipeline_runs"].index_information()
        assert "status_1_source_1" not in runs and "owed_1" in runs
        assert "owner.kind_1_owner.id_1" not in await store["templates"].index_information(), (
            "a retired index that was never made is no error"
        )
        marker = await store.db[SCHEMA].find_one({"_id": INDEXES_MARKER})
        assert marker is not None and marker["digest"] == indexes_digest()
    finally:
        await store.client.drop_database(store.db.name)
        await store.close()


async def test_a_restarted_server_takes_its_previous_port_again(tmp_path):
    first = EmbeddedMongo(tmp_path)
    await first.start()
    port = first.port
    await first.stop()
    again = EmbeddedMongo(tmp_path)
    try:
        await again.start()
        assert again.owned and again.port == port, "connection strings handed out earlier keep working"
    finally:
        await again.stop()
