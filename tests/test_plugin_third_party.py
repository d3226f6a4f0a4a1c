"""A third-party plugin package, installed with pip from tests/, adds a platform with no core change."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from plugins.manager import Plugins
from tests.conftest import bearer, create_key, signup
from tests.templates_helpers import agent, definition, publish_template

PACKAGE = Path(__file__).parent / "plugin_example"
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]


def pip(*args: str) -> None:
    subprocess.run([*PIP, *args], check=True, capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def installed_plugin():
    pip("install", "--no-deps", "--no-build-isolation", str(PACKAGE))
    importlib.invalidate_caches()
    try:
        yield
    finally:
        pip("uninstall", "--yes", "svc-plugin-example")
        importlib.invalidate_caches()
        sys.modules.pop("svc_plugin_example", None)
        # Removed cleanly: a new plugin manager no longer finds it.
        assert "exampleRun" not in {p.id for p in Plugins().platforms()}


async def test_the_plugin_adds_a_platform_that_installs_and_uninstalls(installed_plugin, make_client):
    client = await make_client(rate_limit_multiplier=None)
    platforms = {p["id"]: p for p in (await (await client.get("/api/platforms")).json())["platforms"]}
    assert set(platforms) == {"orchA", "orchB", "orchC", "exampleRun"}
    assert platforms["exampleRun"]["credentialFields"] == [
        {"key": "token", "label": "Access token", "type": "password", "required": True}
    ]
    assert platforms["exampleRun"]["capabilities"]["maxHierarchyDepth"] == 2

    caller = await signup(client)
    key = bearer(await create_key(client, caller))
    template = await publish_template(
        client,
        key["Authorization"][7:],
        visibility="public",
        definition=definition(agent("lead"), agent("helper")),
    )
    body = {"templateId": template["id"], "platform": "exampleRun", "credentials": {"token": "nope"}}
    refused = await client.post("/api/installs", json=body, headers=key)
    assert refused.status == 400 and "ex_" in (await refused.json())["error"]
    body["credentials"] = {"token": "ex_123"}
    created = await client.post("/api/installs", json=body, headers=key)
    assert created.status == 201, await created.text()
    install = await created.json()
    assert [a["externalId"] for a in install["deployedAgents"]] == [
        f"ex-{install['installId']}-lead",
        f"ex-{install['installId']}-helper",
    ]
    removed = await client.delete(f"/api/installs/{install['installId']}?removeUpstream=true", headers=key)
    assert (await removed.json())["deletedAgents"] == 2


async def test_a_plugin_can_be_disabled_by_name(installed_plugin, make_client):
    client = await make_client(disabled_plugins=("example",))
    platforms = {p["id"] for p in (await (await client.get("/api/platforms")).json())["platforms"]}
    assert platforms == {"orchA", "orchB", "orchC"}
