"""Shared helpers for the install tests: a template with inputs, install calls over HTTP, the fake
orchB upstream on loopback.

A plain module (not a conftest): the test modules import what they use.
"""

from __future__ import annotations

from typing import Any

from plugins.builtin import orch_c_bedrock
from tests.fakes import orch_c
from tests.fakes.orch_b import FakeOrchB, create_app
from tests.support.accounts import bearer
from tests.support.templates import agent, definition, publish_template

VARIABLES = ["company", "tone"]
SECRETS = ["API_TOKEN", "CRM_KEY"]
# The platforms of the spec's field-support matrix (spec "Installs").
PLATFORMS = ("svc", "orchA", "orchB", "orchC")


def team_definition(**fields: Any) -> dict[str, Any]:
    """Two agents (a lead and a writer reporting to it) that use both variables and need two secrets."""
    value = definition(
        agent("lead", name="Lead", prompt="You lead the team of {{company}}."),
        agent("writer", name="Writer", prompt="You write in a {{ tone }} tone.", reportsTo="lead"),
        requiredVariables=list(VARIABLES),
        requiredSecrets=list(SECRETS),
    )
    value.update(fields)
    return value


async def published_team(client: Any, key: str, **fields: Any) -> dict[str, Any]:
    """A published template (public unless told otherwise) with the team above."""
    fields.setdefault("definition", team_definition())
    return await publish_template(client, key, **fields)


async def install(client: Any, key: str, **body: Any) -> Any:
    """POST /api/installs; returns the response."""
    return await client.post("/api/installs", json=body, headers=bearer(key))


async def install_ok(client: Any, key: str, **body: Any) -> dict[str, Any]:
    """POST /api/installs and assert 201; returns the body."""
    response = await install(client, key, **body)
    assert response.status == 201, await response.text()
    return dict(await response.json())


async def managed_install(client: Any, key: str, template_id: str, **variables: str) -> dict[str, Any]:
    """An `svc` install of the template (the creating key becomes linked to it)."""
    return await install_ok(client, key, templateId=template_id, platform="svc", variables=variables)


async def list_installs(client: Any, key: str) -> list[dict[str, Any]]:
    """GET /api/installs; asserts 200 and returns the list."""
    response = await client.get("/api/installs", headers=bearer(key))
    assert response.status == 200, await response.text()
    return list((await response.json())["installs"])


async def mine(client: Any, caller: Any) -> list[dict[str, Any]]:
    """GET /api/installs/mine with the caller's session; asserts 200 and returns the array."""
    response = await client.get("/api/installs/mine", headers=caller.cookie)
    assert response.status == 200, await response.text()
    body = await response.json()
    assert isinstance(body, list)
    return body


async def summary(client: Any, caller: Any, install_id: str) -> dict[str, Any]:
    """The caller's managed-install summary of one install."""
    found = [item for item in await mine(client, caller) if item["id"] == install_id]
    assert len(found) == 1, found
    return found[0]


def orch_b_credentials(fake: FakeOrchB, **overrides: str) -> dict[str, str]:
    """orchB credentials the fake accepts."""
    return {"projectId": fake.project_id, "apiKey": fake.api_key, "region": "f1db6c", **overrides}


ORCH_C_CREDENTIALS = {
    "accessKeyId": "AKIAEXAMPLE",
    "secretAccessKey": "not-a-real-secret",
    "region": "us-east-1",
    "agentResourceRoleArn": "arn:aws:iam::123456789012:role/agents",
}
ORCH_A_CREDENTIALS = {"orchABaseUrl": "http://127.0.0.1:9", "orchAApiKey": "board-key"}


async def start_fake_orch_b(aiohttp_server: Any, monkeypatch: Any) -> FakeOrchB:
    """A running fake orchB upstream; SVC_ORCHB_BASE_URL points the driver at it."""
    state = FakeOrchB()
    server = await aiohttp_server(create_app(state))
    monkeypatch.setenv("SVC_ORCHB_BASE_URL", str(server.make_url("/latest")))
    return state


async def start_fake_orch_c(aiohttp_server: Any, monkeypatch: Any) -> orch_c.FakeBedrockAgents:
    """A running fake orchC upstream (Bedrock Agents); the driver's endpoint setting points at it.
    Install with `credentials=fake.credentials()`."""
    fake = orch_c.FakeBedrockAgents()
    server = await aiohttp_server(orch_c.create_app(fake))
    monkeypatch.setenv(orch_c_bedrock.ENDPOINT_ENV, f"http://127.0.0.1:{server.port}")
    return fake


async def nothing_written(store: Any) -> None:
    """No install record and no install token exist."""
    assert await store.installs.count_documents({}) == 0
    assert await store.install_tokens.count_documents({}) == 0
