"""`svc doctor` makes one real call to every dependency and prints a table.

It runs as a subprocess against the test's database, the session's Ray, local
fake providers (each speaking its own wire format), the SMTP sink and the fake
payment provider, so every check goes over the real wire.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import ray

from actors.deployment import SECRETS_DIR
from tests.fakes.llm import FakeLLM
from tests.fakes.smtp import SmtpSink
from tests.fakes.stripe import WEBHOOK_SECRET
from tests.support.billing import start_fake_stripe

SVC = str(Path(sys.executable).with_name("svc"))
TIMEOUT_S = 180.0


async def run_doctor(env: dict[str, str]) -> tuple[int, dict[str, tuple[str, str]], str]:
    """Exit code, the table's rows by check name ((status, detail)), and the whole output."""
    process = await asyncio.create_subprocess_exec(
        SVC,
        "--log-level",
        "warning",
        "doctor",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), TIMEOUT_S)
    assert process.returncode is not None
    lines = stdout.decode().splitlines()
    assert lines[0].split() == ["CHECK", "STATUS", "DETAIL"]
    rows = {}
    for line in lines[1:]:
        name, rest = line.split(None, 1)
        status = "not configured" if rest.startswith("not configured") else rest.split()[0]
        rows[name] = (status, rest[len(status) :].strip())
    return process.returncode, rows, stdout.decode() + stderr.decode()


def base_env(db_uri: str, tmp_path: Path) -> dict[str, str]:
    """The environment with only the database and Ray configured."""
    unset = ("SVC_PROVIDER", "SVC_STRIPE", "SVC_SMTP")
    env = {k: v for k, v in os.environ.items() if not k.startswith(unset)}
    env.update(
        {
            "SVC_MONGODB_URI": db_uri,
            "SVC_RAY_ADDRESS": ray.get_runtime_context().gcs_address,
            "SVC_DATA_DIR": str(tmp_path / "data"),
        }
    )
    return env


async def test_nothing_configured_but_the_database_and_ray(db_uri, tmp_path, ray_session):
    code, rows, _ = await run_doctor(base_env(db_uri, tmp_path))
    assert code == 0
    # The check publishes nothing: a running service's actors keep their configuration and secrets.
    assert not (tmp_path / "data" / SECRETS_DIR).exists()
    assert rows["database"][0] == "ok" and "MongoDB at 127.0.0.1:" in rows["database"][1]
    assert rows["ray"][0] == "ok"
    for name in ("providerA", "providerB", "providerC", "smtp", "payments"):
        assert rows[name][0] == "not configured", name


async def test_every_dependency_is_called_and_failures_named(db_uri, tmp_path, ray_session, aiohttp_server):
    fakes = {name: FakeLLM(name) for name in ("providerA", "providerB", "providerC")}
    urls = {name: fake.url(await aiohttp_server(fake.app())) for name, fake in fakes.items()}
    sink = await SmtpSink().start()
    stripe = await start_fake_stripe(aiohttp_server)
    try:
        env = base_env(db_uri, tmp_path)
        env.update(
            {
                "SVC_PROVIDERA_API_KEY": fakes["providerA"].api_key,
                "SVC_PROVIDERA_BASE_URL": urls["providerA"],
                "SVC_PROVIDERB_API_KEY": "sk-wrong-key-for-the-check",
                "SVC_PROVIDERB_BASE_URL": urls["providerB"],
                "SVC_PROVIDERC_API_KEY": fakes["providerC"].api_key,
                "SVC_PROVIDERC_BASE_URL": urls["providerC"],
                "SVC_SMTP_URL": f"smtp://mailer:mail-secret@127.0.0.1:{sink.port}",
                "SVC_STRIPE_API_KEY": stripe.api_key,
                "SVC_STRIPE_API_BASE": stripe.base_url,
                "SVC_STRIPE_WEBHOOK_SECRET": WEBHOOK_SECRET,
            }
        )
        code, rows, output = await run_doctor(env)
    finally:
        await sink.stop()
    assert code == 1, "a failed check fails the command"
    assert rows["providerA"][0] == "ok"
    where = urls["providerB"].split("//")[1].split("/")[0]
    assert rows["providerB"] == ("FAILED", f"{where} refused the key (HTTP 401)")
    assert rows["providerC"][0] == "ok"
    assert rows["smtp"][0] == "ok" and "login accepted" in rows["smtp"][1]
    assert rows["payments"][0] == "ok"
    # Each provider got its own wire format's authenticated list-models call.
    assert [(r.method, r.path) for r in fakes["providerA"].requests] == [("GET", "/v1/models")]
    assert fakes["providerA"].requests[0].headers["anthropic-version"]
    assert [(r.method, r.path) for r in fakes["providerB"].requests] == [("GET", "/v1/models")]
    assert [(r.method, r.path) for r in fakes["providerC"].requests] == [("GET", "/v1beta/models")]
    assert ("GET", "/v1/balance", {}) in stripe.requests
    assert len(sink.logins) == 1 and sink.messages == [], "logged in, sent nothing"
    for secret in ("sk-wrong-key-for-the-check", "mail-secret", stripe.api_key, fakes["providerA"].api_key):
        assert secret not in output, "no secret is printed"


async def test_an_unreachable_database_fails(tmp_path, ray_session):
    env = base_env("mongodb://127.0.0.1:1/x", tmp_path)
    env["SVC_DB_TIMEOUT_SECONDS"] = "0.5"  # the check gives up after the configured timeout
    env["SVC_SMTP_URL"] = "smtp://127.0.0.1:1"
    code, rows, _ = await run_doctor(env)
    assert code == 1
    assert rows["database"][0] == "FAILED"
    assert rows["smtp"][0] == "FAILED"
    assert rows["ray"][0] == "ok"
