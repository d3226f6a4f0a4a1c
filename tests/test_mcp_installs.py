"""What an install answer says about the team's MCP servers: consent needed on the managed runtime,
catalogue names this service does not have, and platforms whose agents cannot use MCP servers."""

from __future__ import annotations

from typing import Any

from config.mcp_catalogue import McpCatalogueEntry
from tests.support.accounts import create_key, signup
from tests.support.installs import install_ok, orch_b_credentials, start_fake_orch_b
from tests.support.templates import publish_template

DEFINITION = {
    "agents": [
        {
            "key": "lead",
            "name": "Lead",
            "model": "providerA:small",
            "prompt": "Lead.",
            "mcpServers": ["time", "gone"],
        },
        {
            "key": "writer",
            "name": "Writer",
            "model": "providerA:small",
            "prompt": "Write.",
            "reportsTo": "lead",
        },
    ],
    "mcpServers": [{"name": "time", "catalogue": "time"}, {"name": "gone", "catalogue": "nowhere"}],
}


async def published(client: Any) -> tuple[str, dict[str, Any]]:
    key = await create_key(client, await signup(client))
    return key, await publish_template(client, key, visibility="public", definition=DEFINITION)


async def test_a_managed_install_warns_of_unknown_catalogue_names_and_asks_for_consent(
    make_client: Any,
) -> None:
    client = await make_client(mcp_servers={"time": McpCatalogueEntry(command="x")})
    key, template = await published(client)
    answer = await install_ok(client, key, templateId=template["id"], platform="svc")
    warnings = answer["warnings"]
    assert warnings[0] == (
        "MCP server 'gone': this service's catalogue has no server named 'nowhere' (it has: time); "
        "its tools will not be available"
    )
    assert warnings[1].startswith("MCP: no tool is offered to the agents until you consent to it")
    assert f"GET /api/installs/{answer['installId']}/mcp" in warnings[1]


async def test_a_platform_without_mcp_installs_with_a_warning_naming_the_agents(
    make_client: Any, aiohttp_server: Any, monkeypatch: Any
) -> None:
    fake = await start_fake_orch_b(aiohttp_server, monkeypatch)
    client = await make_client()
    key, template = await published(client)
    answer = await install_ok(
        client, key, templateId=template["id"], platform="orchB", credentials=orch_b_credentials(fake)
    )
    assert answer["warnings"] == [
        "MCP servers are not available on orchB: the MCP servers of agents lead will not be used there "
        "(docs/platforms/orchB.md)"
    ]


async def test_another_tenant_cannot_see_or_decide_an_installs_mcp(make_client: Any) -> None:
    from tests.support.accounts import bearer

    client = await make_client(mcp_servers={"time": McpCatalogueEntry(command="x")})
    key, template = await published(client)
    install_id = (await install_ok(client, key, templateId=template["id"], platform="svc"))["installId"]
    other = bearer(await create_key(client, await signup(client)))
    decision = {"decisions": [{"server": "time", "tool": "t", "digest": "0" * 64, "decision": "refuse"}]}
    assert (await client.get(f"/api/installs/{install_id}/mcp", headers=other)).status == 404
    assert (
        await client.post(f"/api/installs/{install_id}/mcp/consent", json=decision, headers=other)
    ).status == 404
    assert (await client.get(f"/api/installs/{install_id}/mcp/approvals", headers=other)).status == 404
    approve = {"decision": "approve"}
    assert (
        await client.post(f"/api/installs/{install_id}/mcp/approvals/x", json=approve, headers=other)
    ).status == 404
    mine = await client.post(f"/api/installs/{install_id}/mcp/approvals/x", json=approve, headers=bearer(key))
    assert mine.status == 404 and (await mine.json())["error"] == "Approval not found"
    undeclared = {"decisions": [{**decision["decisions"][0], "server": "nope"}]}
    refused = await client.post(
        f"/api/installs/{install_id}/mcp/consent", json=undeclared, headers=bearer(key)
    )
    assert refused.status == 400 and "decisions[0].server" in (await refused.json())["error"]
