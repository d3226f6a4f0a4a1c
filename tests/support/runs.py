"""Shared helpers for the run tests: installs that hold a real install token, and run reports over HTTP.

An orchA install is made against the fake Paperclip server; the install token is read
from what the driver sent upstream (each agent's adapter env carries SVC_INSTALL_TOKEN),
exactly as a deployed agent would receive it. orchB sends no token upstream, so for orchB
the app's own credential service issues one (the same call install creation makes).

A plain module (not a conftest): the test modules import what they use.
"""

from __future__ import annotations

from typing import Any

from api.context import SERVICES
from tests.fakes.orch_a import FakePaperclip
from tests.support.accounts import bearer
from tests.support.installs import install_ok, orch_b_credentials
from tests.support.templates import agent, definition, publish_template

TEAM = definition(
    agent("lead", name="Lead", model="providerA:small"),
    agent("writer", name="Writer", reportsTo="lead", model="providerB:standard"),
)


async def start_paperclip(aiohttp_server: Any) -> FakePaperclip:
    """A running fake orchA upstream; its URL is in `base_url`."""
    fake = FakePaperclip()
    server = await aiohttp_server(fake.app())
    fake.base_url = str(server.make_url("")).rstrip("/")  # type: ignore[attr-defined]
    return fake


async def paid_template(client: Any, key: str, pricing: str = "free", **fields: Any) -> dict[str, Any]:
    """A published public template of TEAM with the given pricing model."""
    price = None if pricing == "free" else 5
    fields.setdefault("definition", TEAM)
    return await publish_template(client, key, pricingModel=pricing, priceUsdCents=price, **fields)


async def orch_a_install(
    client: Any, key: str, fake: FakePaperclip, template_id: str, **extra: Any
) -> tuple[dict[str, Any], str]:
    """An orchA install through the fake; the install response and the install token the agents got.

    `extra`: more install body fields (the billing fields, say). The team needs one agent that
    runs on Paperclip itself (not an `http` one, which the runtime runs and which gets no token)."""
    seen = set(fake.agents)
    body = {
        "templateId": template_id,
        "platform": "orchA",
        "companyName": "Acme",
        "credentials": {"orchABaseUrl": fake.base_url, "orchAApiKey": fake.api_key},  # type: ignore[attr-defined]
        **extra,
    }
    install = await install_ok(client, key, **body)
    tokens = {
        a["adapterConfig"]["env"]["SVC_INSTALL_TOKEN"]
        for i, a in fake.agents.items()
        if i not in seen and "env" in a["adapterConfig"]
    }
    assert len(tokens) == 1, tokens
    return install, tokens.pop()


async def orch_b_install(client: Any, key: str, fake: Any, template_id: str) -> tuple[str, dict[str, str]]:
    """An orchB install through a running fake Relevance AI upstream (`start_fake_orch_b`);
    (install id, {agentKey: upstream agent id})."""
    install = await install_ok(
        client, key, templateId=template_id, platform="orchB", credentials=orch_b_credentials(fake)
    )
    return install["installId"], {a["key"]: a["externalId"] for a in install["deployedAgents"]}


async def issue_token(client: Any, install_id: str) -> str:
    """A fresh install token for the install, from the app's credential service."""
    return str(await client.server.app[SERVICES].credentials.issue_install_token(install_id))


def ingest_body(platform_agent_id: str, platform: str = "orchA", **fields: Any) -> dict[str, Any]:
    """A valid ingest body (completed, with tokens); keyword arguments override."""
    body: dict[str, Any] = {
        "platformAgentId": platform_agent_id,
        "platform": platform,
        "runId": "run-1",
        "status": "completed",
        "inputTokens": 100,
        "outputTokens": 20,
        "errorMessage": None,
    }
    body.update(fields)
    return body


async def ingest(client: Any, token: str, body: dict[str, Any]) -> Any:
    """POST /api/runs/ingest with an install token; returns the response."""
    return await client.post("/api/runs/ingest", json=body, headers=bearer(token))
