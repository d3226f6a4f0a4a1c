"""A third-party plugin package, installed with pip from tests/, adds a platform with no core change."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from api.context import SERVICES
from plugins.manager import Plugins
from tests.support.accounts import app_store, bearer, create_key, signup
from tests.support.templates import agent, definition, publish_template

PACKAGE = Path(__file__).parent / "plugin_example"
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]


def pip(*args: str) -> None:
    subprocess.run([*PIP, *args], check=True, capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def installed_plugin(tmp_path_factory: pytest.TempPathFactory):
    """The package installed by pip into a directory on this process's path only: the shared
    environment stays as it was, so test processes running beside this one (pytest-xdist)
    never see a fifth platform."""
    target = tmp_path_factory.mktemp("site")
    pip("install", "--no-deps", "--no-build-isolation", "--target", str(target), str(PACKAGE))
    sys.path.insert(0, str(target))
    importlib.invalidate_caches()
    try:
        yield
    finally:
        sys.path.remove(str(target))
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


async def test_a_fifth_platform_gets_every_trait_without_a_core_change(installed_plugin, make_client):
    """Each trait the plugin sets changes what the core does for its installs (compare orchB,
    which has none of them), through the public contract only."""
    import svc_plugin_example as example

    client = await make_client(rate_limit_multiplier=None)
    caller = await signup(client)
    key = bearer(await create_key(client, caller))
    raw_key = key["Authorization"][7:]

    # maxHierarchyDepth 2 is enforced at install time (the platform does not flatten).
    deep = definition(
        agent("lead"), agent("a", reportsTo="lead"), agent("b", reportsTo="a"), agent("c", reportsTo="b")
    )
    deep_template = await publish_template(client, raw_key, visibility="public", definition=deep)
    body = {"templateId": deep_template["id"], "platform": "exampleRun", "credentials": {"token": "ex_1"}}
    refused = await client.post("/api/installs", json=body, headers=key)
    assert refused.status == 400
    assert "at most 2 level(s)" in (await refused.json())["error"]

    # uses_secrets: install secrets are remembered and pre-fill the next install of the owner.
    team = definition(agent("lead"), agent("helper", reportsTo="lead"), requiredSecrets=["API_TOKEN"])
    template = await publish_template(
        client, raw_key, visibility="public", definition=team, pricingModel="per_k_tokens", priceUsdCents=5
    )
    body = {
        "templateId": template["id"],
        "platform": "exampleRun",
        "credentials": {"token": "ex_1"},
        "secrets": {"API_TOKEN": "first-value"},
    }
    first = await client.post("/api/installs", json=body, headers=key)
    assert first.status == 201, await first.text()
    install_id = (await first.json())["installId"]
    del body["secrets"]
    second = await client.post("/api/installs", json=body, headers=key)
    assert second.status == 201, await second.text()
    assert example.SECRETS_SEEN[(await second.json())["installId"]] == {"API_TOKEN": "first-value"}

    # secrets_updatable: PATCH /secrets is accepted.
    patched = await client.patch(f"/api/installs/{install_id}/secrets", json={"API_TOKEN": "v2"}, headers=key)
    assert patched.status == 200, await patched.text()

    # reports_tokens off: a per_k_tokens template's run report needs no token counts.
    token = example.INSTALL_TOKENS[install_id]
    report = {"platform": "exampleRun", "agentKey": "lead", "runId": "r-1", "status": "completed"}
    ingested = await client.post("/api/runs/ingest", json=report, headers=bearer(token))
    assert ingested.status == 200, await ingested.text()

    # invokable: invoke reaches the plugin's svc_invoke and the run is recorded.
    invoked = await client.post(f"/api/installs/{install_id}/invoke", json={"inputText": "hi"}, headers=key)
    assert invoked.status == 200, await invoked.text()
    assert (await invoked.json())["text"] == "echo: hi" and example.INVOKED[-1] == "hi"

    # polled: the run poller asks the plugin for runs and records them.
    example.UPSTREAM_RUNS[install_id] = [
        example.RunReport(platformAgentId=f"ex-{install_id}-helper", runId="polled-1", status="completed")
    ]
    assert await client.server.app[SERVICES].run_poller.poll_once() >= 1
    stored = await app_store(client)["runs"].find_one({"installId": install_id, "runId": "polled-1"})
    assert stored is not None and stored["agentKey"] == "helper"

    # deprovision_on_delete: a plain DELETE removes the agents upstream and drops the credentials.
    removed = await client.delete(f"/api/installs/{install_id}", headers=key)
    assert removed.status == 200 and (await removed.json())["deletedAgents"] == 2
    assert install_id not in example.DEPLOYED
    doc = await app_store(client).installs.find_one({"_id": install_id})
    assert doc["status"] == "cancelled" and "credentialsEncrypted" not in doc
