"""Bounds on what one request may carry: install secrets, lists and numbers (OWASP API4)."""

from __future__ import annotations

import asyncio

from svc.installs.fields import MAX_INSTALL_SECRETS
from tests.conftest import bearer
from tests.installs_helpers import published_team, svc_install
from tests.templates_helpers import user_with_key


async def patch_secrets(client, key, install_id, body):
    """PATCH /api/installs/:id/secrets; the response."""
    return await client.patch(f"/api/installs/{install_id}/secrets", json=body, headers=bearer(key))


async def test_install_secrets_are_capped_and_written_in_one_batch(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    _owner, key = await user_with_key(client)
    template = await published_team(client, key)
    install_id = (await svc_install(client, key, template["id"]))["installId"]

    too_many = {f"S_{i}": "v" for i in range(MAX_INSTALL_SECRETS + 1)}
    response = await patch_secrets(client, key, install_id, too_many)
    assert response.status == 400
    assert (await response.json())["error"].startswith("secrets: at most 500 names")

    # Up to the cap in one request: every name stored, and remembered in the vault.
    full = {f"S_{i}": f"value-{i}" for i in range(MAX_INSTALL_SECRETS - 10)}
    response = await patch_secrets(client, key, install_id, full)
    assert response.status == 200, await response.text()
    assert len((await response.json())["updatedKeys"]) == MAX_INSTALL_SECRETS - 10
    assert (
        await store["vault_secrets"].count_documents({"key": {"$regex": "^S_"}}) == MAX_INSTALL_SECRETS - 10
    )

    # Overwriting held names does not count twice; new names beyond the cap are refused.
    response = await patch_secrets(
        client, key, install_id, {"S_0": "again", **{f"N_{i}": "v" for i in range(10)}}
    )
    assert response.status == 200, await response.text()
    response = await patch_secrets(client, key, install_id, {"ONE_MORE": "v"})
    assert response.status == 400
    assert "holds 500" in (await response.json())["error"]

    doc = await store.installs.find_one({"_id": install_id})
    assert len(doc["secretsEncrypted"]) == MAX_INSTALL_SECRETS


async def test_racing_secret_merges_cannot_pass_the_cap_together(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    _owner, key = await user_with_key(client)
    template = await published_team(client, key)
    install_id = (await svc_install(client, key, template["id"]))["installId"]
    base = {f"B_{i}": "v" for i in range(MAX_INSTALL_SECRETS - 5)}
    assert (await patch_secrets(client, key, install_id, base)).status == 200
    # Two merges of 5 new names each: exactly one fits.
    first = {f"X_{i}": "v" for i in range(5)}
    second = {f"Y_{i}": "v" for i in range(5)}
    answers = await asyncio.gather(
        patch_secrets(client, key, install_id, first), patch_secrets(client, key, install_id, second)
    )
    assert sorted(response.status for response in answers) == [200, 400]
    doc = await store.installs.find_one({"_id": install_id})
    assert len(doc["secretsEncrypted"]) == MAX_INSTALL_SECRETS


async def test_the_secrets_body_is_capped(make_client):
    client = await make_client(rate_limit_multiplier=None)
    _owner, key = await user_with_key(client)
    template = await published_team(client, key)
    install_id = (await svc_install(client, key, template["id"]))["installId"]
    big = {f"S_{i}": "x" * 60_000 for i in range(20)}
    response = await patch_secrets(client, key, install_id, big)
    assert response.status == 413
    assert await response.json() == {"error": "Request body too large"}
