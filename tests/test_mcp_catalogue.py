"""The operator's MCP catalogue: the file (JSON or TOML) and its one-line start-up errors,
`svc doctor` starting each server and listing its tools, and who may use each server."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from config.mcp_catalogue import McpServersFileError, load_mcp_servers_file
from config.settings import Settings, SettingsError
from svc.mcp import Catalogue, Unavailable
from tests.support.mcp import REPO
from tests.test_doctor import base_env, run_doctor

TOML = """
[servers.time]
command = "/opt/mcp/bin/mcp-server-time"
args = ["--local-timezone", "UTC"]
env = { TZ = "UTC", TOKEN = "${TIME_TOKEN}" }
description = "Time"

[servers.search]
url = "http://search.internal:8000/mcp"
headers = { Authorization = "Bearer ${SEARCH_TOKEN}" }
orgs = ["org-1"]
templates = ["research"]
timeoutSeconds = 5
"""


def test_a_toml_catalogue_is_read(tmp_path: Path) -> None:
    path = tmp_path / "mcp.toml"
    path.write_text(TOML)
    servers = load_mcp_servers_file(path)
    assert servers["time"].transport == "stdio" and servers["time"].args == ("--local-timezone", "UTC")
    assert servers["search"].transport == "streamable-http" and servers["search"].timeout_seconds == 5.0
    settings = Settings.from_env({"SVC_MCP_SERVERS_FILE": str(path)})
    assert sorted(settings.mcp_servers) == ["search", "time"]


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("[servers.x\n", "not valid TOML"),
        (
            "[servers.x]\ncommand = 'a'\nurl = 'http://h/'\n",
            "key servers.'x': give exactly one of `command` (stdio) or `url`",
        ),
        ("[servers.x]\ncommand = 'a'\nshell = true\n", "key servers.'x'.shell: unknown key"),
        ("[servers.x]\ncommand = 'a'\nargs = 'b'\n", "key servers.'x'.args: expected a list of strings"),
        ("[servers.X]\ncommand = 'a'\n", "names are lowercase letters"),
        ("[servers.x]\nurl = 'ftp://h/'\n", "key servers.'x'.url: expected an http:// or https:// URL"),
        (
            "[servers.x]\nurl = 'http://h/'\nenv = {A = 'b'}\n",
            "key servers.'x'.env: only for a `command` server",
        ),
        ("[other]\n", "expected one table, `servers`"),
    ],
)
def test_a_catalogue_that_does_not_parse_stops_start_up_in_one_line(
    tmp_path: Path, content: str, problem: str
) -> None:
    path = tmp_path / "mcp.toml"
    path.write_text(content)
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"SVC_MCP_SERVERS_FILE": str(path)})
    message = str(caught.value)
    assert message.startswith(f"SVC_MCP_SERVERS_FILE: {path}: ") and problem in message
    assert "\n" not in message


def test_a_json_catalogue_and_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"servers": {"time": {"command": "t"}}}))
    assert load_mcp_servers_file(path)["time"].command == "t"
    with pytest.raises(McpServersFileError, match="cannot be read"):
        load_mcp_servers_file(tmp_path / "none.json")


def test_who_may_use_a_server_and_secrets_filled_in(tmp_path: Path) -> None:
    path = tmp_path / "mcp.toml"
    path.write_text(TOML)
    catalogue = Catalogue(load_mcp_servers_file(path))
    research, other = {"id": "t1", "slug": "research"}, {"id": "t2", "slug": "other"}
    org, user = {"kind": "org", "id": "org-1"}, {"kind": "user", "id": "u1"}
    assert catalogue.allowed("search", research, org)
    assert not catalogue.allowed("search", other, org) and not catalogue.allowed("search", research, user)
    assert catalogue.allowed("time", other, user) and not catalogue.allowed("nope", other, user)
    target = catalogue.target({"name": "t", "catalogue": "time"}, {"TIME_TOKEN": "s3"}, False, other, user)
    assert (
        dict(target.env) == {"TZ": "UTC", "TOKEN": "s3"} and target.command == "/opt/mcp/bin/mcp-server-time"
    )
    with pytest.raises(Unavailable, match="not offered to this template or org"):
        catalogue.target({"name": "s", "catalogue": "search"}, {}, False, other, user)
    with pytest.raises(Unavailable, match="no MCP server named 'gone'"):
        catalogue.target({"name": "g", "catalogue": "gone"}, {}, False, other, user)
    assert catalogue.describe()[0] == {
        "name": "search",
        "description": "",
        "transport": "streamable-http",
        "restricted": True,
    }


async def test_doctor_starts_each_server_and_lists_its_tools(db_uri, tmp_path, ray_session) -> None:
    catalogue = {
        "servers": {
            "exact": {
                "command": sys.executable,
                "args": ["-m", "tests.fakes.mcp_exact", "stdio"],
                "env": {"PYTHONPATH": str(REPO)},
            },
            "missing": {"command": str(tmp_path / "no-such-server")},
            "down": {"url": "http://127.0.0.1:9/mcp"},
        }
    }
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(catalogue))
    env = {**base_env(db_uri, tmp_path), "SVC_MCP_SERVERS_FILE": str(path)}
    code, rows, _ = await run_doctor(env)
    assert code == 1
    assert rows["mcp:exact"][0] == "ok" and rows["mcp:exact"][1].startswith(
        "stdio: 9 tools (echo, add, slow, fail, huge, ...)"
    )
    assert rows["mcp:missing"] == (
        "FAILED",
        "MCP server 'missing' could not be reached: the command was not found",
    )
    assert rows["mcp:down"][0] == "FAILED" and "could not be reached" in rows["mcp:down"][1]


async def test_builders_read_the_catalogue_names(make_client) -> None:
    from config.mcp_catalogue import McpCatalogueEntry
    from tests.support.accounts import bearer, create_key, signup

    client = await make_client(mcp_servers={"time": McpCatalogueEntry(command="x", description="Time")})
    key = await create_key(client, await signup(client))
    answer = await client.get("/api/mcp/servers", headers=bearer(key))
    assert await answer.json() == {
        "servers": [{"name": "time", "description": "Time", "transport": "stdio", "restricted": False}]
    }
    assert (await client.get("/api/mcp/servers")).status == 401
