"""Ray workers reach the same database as the API, through the URI the API passes them."""

from __future__ import annotations

import asyncio
import os

import ray
from pymongo import MongoClient

from svc.core.embedded import uri_for


@ray.remote
def read_marker(marker: str) -> str | None:
    """Runs in a Ray worker: find the marker through the URI in the worker's environment."""
    with MongoClient(os.environ["SVC_MONGODB_URI"]) as client:
        doc = client.get_default_database().markers.find_one({"_id": marker})
    return doc["value"] if doc else None


async def test_ray_worker_reads_what_the_api_wrote(ray_session, mongo_port):
    with MongoClient(uri_for(mongo_port)) as client:
        client.get_default_database().markers.insert_one({"_id": "m1", "value": "from the API"})
    assert await asyncio.to_thread(ray.get, read_marker.remote("m1")) == "from the API"


async def test_health_reports_ray(client):
    body = await (await client.get("/api/health")).json()
    assert body["checks"]["ray"] == "ok"
