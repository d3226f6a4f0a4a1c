"""Operator and builder commands of `svc`: a missing database is refused, templates go out and in."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from tests.support.accounts import bearer
from tests.support.templates import definition, publish_template, user_with_key
from tests.support.waiting import wait_for

SVC = str(Path(sys.executable).with_name("svc"))


async def svc(*argv: str, env: dict[str, str], stdin: bytes | None = None) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        SVC,
        *argv,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(stdin), 60)
    return process.returncode or 0, out.decode(), err.decode()


async def test_an_operator_command_refuses_a_data_dir_with_no_database(tmp_path, secret_key):
    env = {k: v for k, v in os.environ.items() if k != "SVC_MONGODB_URI"}
    env.update(SVC_DATA_DIR=str(tmp_path / "empty"), SVC_SECRET_KEYS=secret_key)
    code, _, err = await svc(
        "users", "create", "--email", "a@example.com", "--password", "long enough", env=env
    )
    assert code == 1 and "no database in" in err and "svc serve" in err
    assert not (tmp_path / "empty" / "mongo").exists(), "no empty database was made"


async def test_templates_export_and_import_from_the_command_line(make_client, tmp_path):
    client = await make_client(rate_limit_multiplier=None)
    _, key = await user_with_key(client)
    template = await publish_template(client, key, definition=definition(), description="from the CLI")
    url = str(client.server.make_url("/")).rstrip("/")
    env = {**os.environ, "SVC_API_KEY": key}
    document = tmp_path / "team.json"
    code, _, err = await svc(
        "templates", "export", template["id"], "--history", "--out", str(document), "--url", url, env=env
    )
    assert code == 0, err
    exported = json.loads(document.read_text())
    assert exported["format"] == "svc.template" and len(exported["versions"]) == 1
    code, out, err = await svc("templates", "import", str(document), "--url", url, env=env)
    assert code == 0, err
    draft = json.loads(out)
    assert draft["status"] == "draft" and draft["description"] == "from the CLI"
    listed = await client.get(f"/api/templates/{draft['id']}", headers=bearer(key))
    assert listed.status == 200
    code, _, err = await svc("templates", "import", "-", "--url", url, env=env, stdin=b'{"format": "x"}')
    assert code == 1 and err.startswith("error: 400")
    code, _, err = await svc(
        "templates", "export", template["id"], "--url", url, env={**os.environ, "SVC_API_KEY": ""}
    )
    assert code == 1 and "API key" in err


async def test_an_operator_disables_and_deletes_a_user_from_the_command_line(make_client, db_uri, secret_key):
    client = await make_client(rate_limit_multiplier=None)
    caller, key = await user_with_key(client)
    env = {**os.environ, "SVC_MONGODB_URI": db_uri, "SVC_SECRET_KEYS": secret_key}
    code, _, err = await svc("users", "disable", caller.email, env=env)
    assert code == 0, err

    async def refused() -> bool:
        return (await client.get("/api/auth/key-identity", headers=bearer(key))).status == 401

    assert await wait_for(refused, timeout_s=10), "a disabled user's key stops working"
    code, _, err = await svc("users", "delete", caller.email, env=env)
    assert code == 0, err
    assert (await client.get("/api/auth/me", headers=caller.cookie)).status == 401
    code, _, err = await svc("users", "disable", "nobody@example.com", env=env)
    assert code == 1 and "error: User not found" in err
