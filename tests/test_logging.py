"""Logs are JSON lines with request ids, and carry no secrets."""

from __future__ import annotations

import json
import logging

from api.logs import JsonFormatter
from tests.support.accounts import create_key, signup


def test_formatter_writes_one_json_object_with_extras():
    record = logging.LogRecord("svc.test", logging.INFO, __file__, 1, "hello %s", ("world",), None)
    record.status = 201
    line = JsonFormatter().format(record)
    entry = json.loads(line)
    assert entry["msg"] == "hello world"
    assert entry["level"] == "info"
    assert entry["status"] == 201
    assert entry["ts"].endswith("Z")


async def test_access_log_has_request_id_and_no_secrets(client, caplog):
    caplog.set_level(logging.DEBUG)
    caller = await signup(client, password="my-secret-password-123")
    key = await create_key(client, caller)
    response = await client.get("/api/auth/key-identity", headers={"Authorization": f"Bearer {key}"})
    request_id = response.headers["X-Request-Id"]
    formatter = JsonFormatter()
    lines = [formatter.format(record) for record in caplog.records]
    text = "\n".join(lines)
    assert "my-secret-password-123" not in text
    assert key not in text
    assert caller.session not in text
    access = [json.loads(line) for line in lines if '"svc.access"' in line]
    assert any(entry.get("requestId") == request_id and entry["status"] == 200 for entry in access)
