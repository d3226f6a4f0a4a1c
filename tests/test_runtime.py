"""Ray workers reach the same database as the API, through the deployment's configuration
(its settings from Ray's key-value store, the database URI from the node: actors/deployment.py)."""

from __future__ import annotations

import asyncio

import ray
from pymongo import MongoClient

from actors import deployment
from api.app import RUNTIME


@ray.remote
def read_marker(deployment_id: str, marker: str) -> str | None:
    """Runs in a Ray worker: find the marker in the deployment's database."""
    config = deployment.current(deployment_id)
    assert config is not None
    with MongoClient(config.mongodb_uri) as client:
        doc = client.get_default_database().markers.find_one({"_id": marker})
    return doc["value"] if doc else None


async def test_ray_worker_reads_what_the_api_wrote(make_client, store):
    client = await make_client()
    await store["markers"].insert_one({"_id": "m1", "value": "from the API"})
    deployment_id = client.server.app[RUNTIME].deployment_id
    assert await asyncio.to_thread(ray.get, read_marker.remote(deployment_id, "m1")) == "from the API"
