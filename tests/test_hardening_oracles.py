"""Same answer for "not yours" and "not there": no oracle for slugs or archived templates."""

from __future__ import annotations

from tests.support.accounts import bearer, create_key
from tests.support.installs import managed_install as svc_install
from tests.support.installs import published_team
from tests.support.templates import create_template, unique_slug, user_with_key


async def answer(response) -> tuple[int, str]:
    """Status and error text."""
    return response.status, (await response.json()).get("error", "")


async def test_installing_someone_elses_archived_template_is_not_found(client):
    _builder, builder_key = await user_with_key(client)
    template = await published_team(client, builder_key)
    archived = await client.post(f"/api/templates/{template['id']}/archive", headers=bearer(builder_key))
    assert archived.status == 200, await archived.text()
    _other, other_key = await user_with_key(client)

    body = {"templateId": template["id"], "platform": "svc"}
    not_yours = await answer(await client.post("/api/installs", json=body, headers=bearer(other_key)))
    missing = {"templateId": "0" * 24, "platform": "svc"}
    not_there = await answer(await client.post("/api/installs", json=missing, headers=bearer(other_key)))
    looked_up = await client.get(f"/api/templates/{template['id']}", headers=bearer(other_key))
    assert not_yours == not_there == (404, "Template not found")
    assert looked_up.status == 404
    # The builder still learns why their own template cannot be installed.
    own = await answer(await client.post("/api/installs", json=body, headers=bearer(builder_key)))
    assert own[0] == 409


async def test_billing_gives_a_scoped_key_one_answer_for_private_and_missing_slugs(client):
    _builder, builder_key = await user_with_key(client)
    private = await create_template(client, builder_key, visibility="team")
    deployer, deployer_key = await user_with_key(client)
    mine = await published_team(client, deployer_key)
    install_id = (await svc_install(client, deployer_key, mine["id"]))["installId"]
    scoped = await create_key(client, deployer, installId=install_id)

    for extra in ("", f"&installId={install_id}"):
        private_answer = await answer(
            await client.get(f"/api/billing?templateSlug={private['slug']}{extra}", headers=bearer(scoped))
        )
        missing_answer = await answer(
            await client.get(f"/api/billing?templateSlug={unique_slug()}{extra}", headers=bearer(scoped))
        )
        assert private_answer == missing_answer, extra
