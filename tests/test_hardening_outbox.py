"""A delivered mail's body (an invitation link carries a token) is not kept in the outbox."""

from __future__ import annotations

import json

from tests.fakes.smtp import SmtpSink
from tests.support.accounts import app_store, signup
from tests.support.orgs import LINK, create_org, send


async def test_a_delivered_invitation_leaves_no_token_in_the_database(make_client):
    sink = await SmtpSink().start()
    try:
        client = await make_client(smtp_url=f"smtp://127.0.0.1:{sink.port}", rate_limit_multiplier=None)
        owner = await signup(client)
        org = await create_org(client, owner)
        response = await send(
            client, owner, "POST", f"/api/orgs/{org['slug']}/invitations", {"email": "guest@example.com"}
        )
        assert response.status in (200, 201), await response.text()
        assert len(sink.messages) == 1
        match = LINK.search(sink.messages[0].get_payload())
        assert match is not None
        token = match.group(1)
        store = app_store(client)
        record = await store["outbox"].find_one({"to": "guest@example.com"})
        assert record["status"] == "sent" and "body" not in record
        for name in ("outbox", "org_invitations", "invitations", "org_audit"):
            documents = await store[name].find().to_list(None)
            assert token not in json.dumps(documents, default=str), name
    finally:
        await sink.stop()
