"""Test fixtures: one embedded database and one local Ray per session, a fresh
database name per test. Helpers shared by the test modules live in tests/support/."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from aiohttp import web
from aiohttp.test_utils import TestClient
from cryptography.fernet import Fernet

from actors.runtime import NAMESPACE, RayRuntime
from api.app import create_app
from api.routing import Route
from config.settings import Settings
from svc.core.store import Store
from svc.subprocesses.embedded_db import EmbeddedMongo, uri_for
from tests.heavy_first import pytest_collection_modifyitems  # noqa: F401 - longest files first
from tests.leftovers import (  # noqa: F401 - the session's leftover check
    pytest_addoption,
    pytest_configure,
    pytest_sessionfinish,
)
from tests.support import shared_db

# Fixtures kept beside the helpers they build on: `gov` (the governance and plan rule tests).
pytest_plugins = ["tests.support.governance"]

ClientFactory = Callable[..., Awaitable[TestClient[web.Request, web.Application]]]


@pytest.fixture(scope="session")
def mongo_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The session's embedded MongoDB-wire server (the same code `svc serve` uses), or one of
    the running ones that the session joins and leaves running (SVC_TEST_MONGO_DIR:
    tests/support/shared_db.py)."""
    shared = os.environ.get(shared_db.VARIABLE)
    directory = shared_db.joined(shared, os.getpid()) if shared else tmp_path_factory.mktemp("mongo")
    # Test commands: the fault injection of tests/support/faults.py. No fsync per commit: a test's
    # data need not outlive a power cut, and writes are about twice as fast (docs/testing.md).
    server = EmbeddedMongo(directory, test_commands=True, sync=False)
    asyncio.run(server.start())
    assert server.port is not None
    yield server.port
    asyncio.run(server.stop())


@pytest.fixture(scope="session")
def ray_session(mongo_port: int) -> Iterator[None]:
    """One local Ray for the whole session; every app joins it."""
    runtime = RayRuntime(None, uri_for(mongo_port))
    runtime.start()
    yield
    runtime.stop()


@pytest.fixture
def db_uri(mongo_port: int) -> str:
    """A connection string naming a database of this test's own."""
    return uri_for(mongo_port, f"t_{uuid.uuid4().hex[:16]}")


@pytest.fixture
async def store(db_uri: str) -> AsyncIterator[Store]:
    """Direct access to the test's database, for seeding and for checking what was written."""
    store = Store.connect(db_uri)
    yield store
    # No API stops a deployment's scheduler (actors/scheduler.py): the test's own go with its database.
    await asyncio.to_thread(stop_schedulers, store.db.name)
    await store.client.drop_database(store.db.name)
    await store.close()


def stop_schedulers(database: str) -> None:
    """Kill the scheduler actors of the deployments on `database` (named `scheduler:<database>-<hash>`)
    and the spare install actors they started (`spare:<database>-<hash>:<id>`)."""
    if not ray.is_initialized():
        return
    prefixes = (f"scheduler:{database}-", f"spare:{database}-")
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry.get("namespace") == NAMESPACE and entry.get("name", "").startswith(prefixes):
            ray.kill(ray.get_actor(entry["name"], namespace=NAMESPACE), no_restart=True)


@pytest.fixture
def secret_key() -> str:
    """The Fernet key the test's apps use."""
    return Fernet.generate_key().decode()


@pytest.fixture
def make_settings(db_uri: str, tmp_path: Path, secret_key: str) -> Callable[..., Settings]:
    """Settings for an app on the test's database; keyword arguments override."""

    def build(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "mongodb_uri": db_uri,
            "data_dir": tmp_path / "data",
            "secret_keys": (secret_key,),
            "egress_allow_private": True,
            "scheduler_enabled": False,  # tests of schedules turn it on
            "actor_spares": 0,  # tests of the warm pool turn it on
            "password_cost": 10,  # each sign-up 0.14 s of CPU at the default 14, about 10 ms here
        }
        values.update(overrides)
        return Settings.from_env({}, **values)

    return build


@pytest.fixture
def make_client(
    aiohttp_client: Callable[..., Awaitable[TestClient[web.Request, web.Application]]],
    make_settings: Callable[..., Settings],
    store: Store,
    ray_session: None,
) -> ClientFactory:
    """Start an app (real HTTP on 127.0.0.1) and return a client for it."""

    async def build(
        extra_routes: tuple[Route, ...] = (), **overrides: Any
    ) -> TestClient[web.Request, web.Application]:
        app = create_app(make_settings(**overrides), extra_routes=extra_routes)
        return await aiohttp_client(app)

    return build


@pytest.fixture
async def client(make_client: ClientFactory) -> TestClient[web.Request, web.Application]:
    """An app with default test settings."""
    return await make_client()
