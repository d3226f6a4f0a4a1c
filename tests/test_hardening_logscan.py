"""The log scan: a scripted session (sign-up, keys, an org with its key, secrets and an invitation,
an install with secrets, a webhook run with a signed callback) leaves no credential or secret value
in any log line (API and Ray workers) or stored document. Every credential is stored as a hash or
ciphertext only (the spec's "stored encrypted" / "only its hash"); none is kept in clear anywhere.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import ray
from aiohttp import web

from api.logs import JsonFormatter
from tests.fakes.smtp import SmtpSink
from tests.support.accounts import app_store, bearer, create_key, signup
from tests.support.orgs import LINK, create_org, make_pro, send
from tests.support.runtime import member, provider_settings, start_llm
from tests.support.templates import publish_template
from tests.support.waiting import wait_until


def ray_log_text() -> str:
    """Every log file the local Ray's processes (the install actors among them) wrote."""
    node = ray._private.worker._global_node  # the test's own local Ray
    if node is None:
        return ""
    texts = []
    for path in Path(node.get_logs_dir_path()).glob("*"):
        if path.is_file() and path.suffix in (".out", ".err", ".log"):
            texts.append(path.read_text(errors="replace"))
    return "\n".join(texts)


async def test_no_secret_in_any_log_line_or_stored_document(make_client, aiohttp_server, caplog):
    caplog.set_level(logging.DEBUG)
    # As `configure_logging` does at every level: the driver's command log carries whole documents.
    caplog.set_level(logging.INFO, logger="pymongo")
    sink = await SmtpSink().start()
    llm, llm_url = await start_llm(aiohttp_server)
    received: list[bytes] = []

    async def hook(request: web.Request) -> web.Response:
        received.append(await request.read())
        return web.Response(status=204)

    hook_app = web.Application()
    hook_app.router.add_post("/hook", hook)
    hook_server = await aiohttp_server(hook_app)
    try:
        client = await make_client(
            rate_limit_multiplier=None,
            providers=provider_settings(llm_url),
            smtp_url=f"smtp://127.0.0.1:{sink.port}",
        )
        password = "alice-password-Zq81!x"
        alice = await signup(client, password=password)
        login = await client.post("/api/auth/login", json={"email": alice.email, "password": password})
        login_session = login.cookies["svc_session"].value
        key = await create_key(client, alice)

        org = await create_org(client, alice)
        await make_pro(client, org["id"])
        base = f"/api/orgs/{org['slug']}"
        org_key = (await (await send(client, alice, "POST", f"{base}/keys", {"label": "ci"})).json())["key"]
        org_secret = "org-secret-value-7Hq2"
        await send(client, alice, "POST", f"{base}/secrets", {"key": "CRM_KEY", "value": org_secret})
        bob = await signup(client, email="bob-logscan@example.com")
        await send(client, alice, "POST", f"{base}/invitations", {"email": "bob-logscan@example.com"})
        invitation_token = LINK.search(sink.messages[-1].get_payload()).group(1)
        accepted = await send(client, bob, "POST", f"/api/invitations/{invitation_token}/accept")
        assert accepted.status == 200, await accepted.text()

        template = await publish_template(
            client, key, definition={"version": "v1", "agents": [member("lead")]}
        )
        created = await client.post(
            "/api/installs", json={"templateId": template["id"], "platform": "svc"}, headers=bearer(key)
        )
        install_id = (await created.json())["installId"]
        install_secret = "install-secret-value-Pw93"
        patched = await client.patch(
            f"/api/installs/{install_id}/secrets", json={"API_TOKEN": install_secret}, headers=bearer(key)
        )
        assert patched.status == 200
        scoped = await create_key(client, alice, installId=install_id)
        mine = await (await client.get("/api/installs/mine", headers=alice.cookie)).json()
        webhook_token = mine[0]["webhookToken"]
        made = await client.post(f"/api/installs/{install_id}/callback-secret", headers=alice.cookie)
        callback_secret = (await made.json())["callbackSecret"]

        llm.script(text="done")
        fired = await client.post(
            f"/api/webhook/{webhook_token}",
            json={"inputText": "go", "callbackUrl": str(hook_server.make_url("/hook"))},
            headers=bearer(scoped),
        )
        assert fired.status == 200, await fired.text()
        assert await wait_until(lambda: received)
        await client.get("/api/auth/key-identity", headers=bearer(org_key))
        await client.post(f"/api/webhook/{webhook_token}x", json={"inputText": "typo"})

        secrets = {
            "password": password,
            "session": alice.session,
            "login session": login_session,
            "bob session": bob.session,
            "personal key": key,
            "scoped key": scoped,
            "org key": org_key,
            "org secret": org_secret,
            "install secret": install_secret,
            "webhook token": webhook_token,
            "invitation token": invitation_token,
            "callback secret": callback_secret,
        }
        formatter = JsonFormatter()
        api_logs = "\n".join(formatter.format(r) for r in caplog.records if r.name != "aiohttp.access")
        store = app_store(client)
        documents = {
            name: json.dumps(await store[name].find().to_list(None), default=str)
            for name in await store.db.list_collection_names()
        }
        worker_logs = ray_log_text()
        found = [
            f"{label} in {where}"
            for label, value in secrets.items()
            for where, text in [("API logs", api_logs), ("Ray logs", worker_logs), *documents.items()]
            if value in text
        ]
        print(
            f"\nlog scan: {len(secrets)} secret values, {len(caplog.records)} API log lines, "
            f"{len(documents)} collections, {len(worker_logs)} bytes of Ray logs; {len(found)} occurrences"
        )
        assert found == []
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR], "no 5xx in the session"
    finally:
        await sink.stop()
