"""The template lifecycle over HTTP: every row of the state table (spec "Template lifecycle",
"Templates and authoring", "Versioning") and what else each transition does."""

from __future__ import annotations

import pytest

from tests.support.accounts import bearer, signup
from tests.support.templates import (
    agent,
    create_template,
    definition,
    get_template,
    listed_ids,
    new_version,
    new_version_ok,
    patch,
    patch_ok,
    publish,
    publish_ok,
    publish_template,
    release,
    seed_install,
    template_body,
    user_with_key,
    versions,
)

MAIL_KIND = "template.major_version"
POLICY = {
    "accessPolicyVersion": "1",
    "defaultAction": "deny",
    "rules": [
        {
            "match": {"host": "*.example.com", "methods": ["GET"], "pathPrefix": "/v1"},
            "action": "allow",
            "reason": "read the example API",
        },
        {"match": {"host": "api.example.org"}, "action": "require_approval"},
    ],
}


async def rollback(client, key, template_id, body):
    return await client.post(f"/api/templates/{template_id}/rollback", json=body, headers=bearer(key))


async def fork(client, key, template_id):
    return await client.post(f"/api/templates/{template_id}/fork", headers=bearer(key))


async def archive(client, key, template_id):
    return await client.post(f"/api/templates/{template_id}/archive", headers=bearer(key))


async def delete(client, key, template_id):
    return await client.delete(f"/api/templates/{template_id}", headers=bearer(key))


async def major_mails(store):
    return await store["outbox"].find({"kind": MAIL_KIND}).to_list(None)


# ---- (none) -> Draft ------------------------------------------------------------------


async def test_create_gives_an_unlisted_draft_at_version_1(client, store):
    caller, key = await user_with_key(client)
    body = template_body(name="Support", description="desk", ownerTeam="ops")
    response = await client.post("/api/templates", json=body, headers=bearer(key))
    assert response.status == 201, await response.text()
    created = await response.json()
    assert created["status"] == "draft"
    assert created["version"] == 1
    assert created["slug"] == body["slug"]
    assert (created["name"], created["description"], created["ownerTeam"]) == ("Support", "desk", "ops")
    assert created["publishedAt"] is None
    assert "parentTemplateId" not in created
    assert created["pricingModel"] == "free" and created["priceUsdCents"] is None
    assert created["forkable"] is True
    assert await listed_ids(client) == []
    assert await listed_ids(client, key) == []
    stored = await store["templates"].find_one({"_id": created["id"]})
    assert stored is not None
    assert stored["status"] == "draft" and stored["version"] == 1
    assert stored["owner"] == {"kind": "user", "id": caller.id}
    own = await get_template(client, created["id"], key)
    assert own.status == 200
    assert (await own.json())["id"] == created["id"]


async def test_create_with_a_taken_slug_is_409(client, store):
    _, key = await user_with_key(client)
    first = await create_template(client, key, slug="support-desk")
    response = await client.post(
        "/api/templates", json=template_body(slug="support-desk", name="Other"), headers=bearer(key)
    )
    assert response.status == 409
    assert set(await response.json()) == {"error"}
    docs = await store["templates"].find({"slug": "support-desk"}).to_list(None)
    assert [d["_id"] for d in docs] == [first["id"]]
    assert docs[0]["name"] == "Support Team"


async def test_patch_of_a_draft_edits_definition_changelog_and_name(client, store):
    _, key = await user_with_key(client)
    draft = await create_template(client, key)
    new_definition = definition(agent("lead", prompt="Be brief."), agent("helper", reportsTo="lead"))
    updated = await patch_ok(
        client, key, draft["id"], definition=new_definition, changeLog="two agents", name="Renamed"
    )
    assert updated["id"] == draft["id"]
    assert updated["status"] == "draft" and updated["version"] == 1
    assert updated["name"] == "Renamed"
    assert updated["changeLog"] == "two agents"
    assert [a["key"] for a in updated["definition"]["agents"]] == ["lead", "helper"]
    assert updated["definition"]["agents"][0]["prompt"] == "Be brief."
    stored = await store["templates"].find_one({"_id": draft["id"]})
    assert stored["name"] == "Renamed"
    assert stored["changeLog"] == "two agents"
    assert stored["definition"] == updated["definition"]
    fetched = await (await get_template(client, draft["id"], key)).json()
    assert fetched["name"] == "Renamed"
    assert fetched["definition"] == updated["definition"]


# ---- Draft -> Published ---------------------------------------------------------------


async def test_publish_sets_published_at_and_lists_the_template(client, store):
    _, key = await user_with_key(client)
    draft = await create_template(client, key)
    published = await publish_ok(client, key, draft["id"])
    assert {"id", "slug", "name", "status", "publishedAt"} <= set(published)
    assert published["id"] == draft["id"]
    assert published["slug"] == draft["slug"]
    assert published["name"] == draft["name"]
    assert published["status"] == "published"
    assert isinstance(published["publishedAt"], str) and published["publishedAt"].endswith("Z")
    assert published["version"] == 1
    assert await listed_ids(client) == [draft["id"]]
    stored = await store["templates"].find_one({"_id": draft["id"]})
    assert stored["status"] == "published" and stored["publishedAt"] is not None


async def test_publishing_a_published_template_again_is_409(client, store):
    _, key = await user_with_key(client)
    published = await publish_template(client, key)
    response = await publish(client, key, published["id"])
    assert response.status == 409
    assert set(await response.json()) == {"error"}
    fetched = await (await get_template(client, published["id"], key)).json()
    assert fetched["publishedAt"] == published["publishedAt"]
    assert fetched["version"] == 1
    assert await store["template_versions"].count_documents({"templateId": published["id"]}) == 1


# ---- Published -> Version draft ---------------------------------------------------------


async def test_new_version_inherits_name_description_definition_pricing_and_policy(client, store):
    _, key = await user_with_key(client)
    team = definition(
        agent("lead", accessPolicy=POLICY),
        agent("writer", prompt="Write {{tone}}."),
        requiredVariables=["tone"],
        requiredSecrets=["API_TOKEN"],
    )
    parent = await publish_template(
        client,
        key,
        name="Paid Team",
        description="costs money",
        definition=team,
        pricingModel="per_run",
        priceUsdCents=250,
    )
    response = await new_version(client, key, parent["id"])
    assert response.status == 201, await response.text()
    draft = await response.json()
    assert draft["id"] != parent["id"]
    assert draft["slug"] == parent["slug"]
    assert draft["parentTemplateId"] == parent["id"]
    assert draft["version"] == 2
    assert draft["status"] == "draft"
    assert draft["name"] == "Paid Team"
    assert draft["description"] == "costs money"
    assert draft["definition"] == parent["definition"]
    assert draft["definition"]["agents"][0]["accessPolicy"]["rules"][0]["action"] == "allow"
    assert draft["definition"]["agents"][0]["accessPolicy"]["defaultAction"] == "deny"
    assert (draft["pricingModel"], draft["priceUsdCents"]) == ("per_run", 250)
    assert await listed_ids(client) == [parent["id"]]
    stored = await store["templates"].find_one({"_id": draft["id"]})
    assert stored["parentTemplateId"] == parent["id"]
    parent_now = await (await get_template(client, parent["id"], key)).json()
    assert parent_now["status"] == "published" and parent_now["version"] == 1


async def test_a_second_new_version_while_one_is_open_is_409(client, store):
    _, key = await user_with_key(client)
    parent = await publish_template(client, key)
    first = await new_version_ok(client, key, parent["id"])
    response = await new_version(client, key, parent["id"])
    assert response.status == 409
    drafts = await store["templates"].find({"parentTemplateId": parent["id"]}).to_list(None)
    assert [d["_id"] for d in drafts] == [first["id"]]


async def test_patch_on_a_published_parent_is_409(client, store):
    _, key = await user_with_key(client)
    parent = await publish_template(client, key, name="Original")
    response = await patch(client, key, parent["id"], name="Changed", changeLog="x")
    assert response.status == 409
    stored = await store["templates"].find_one({"_id": parent["id"]})
    assert stored["name"] == "Original"
    assert stored["changeLog"] is None


async def test_new_version_of_a_draft_is_409(client, store):
    _, key = await user_with_key(client)
    draft = await create_template(client, key)
    response = await new_version(client, key, draft["id"])
    assert response.status == 409
    assert await store["templates"].count_documents({}) == 1


async def test_new_version_of_a_version_draft_is_409(client, store):
    _, key = await user_with_key(client)
    parent = await publish_template(client, key)
    draft = await new_version_ok(client, key, parent["id"])
    response = await new_version(client, key, draft["id"])
    assert response.status == 409
    assert await store["templates"].count_documents({}) == 2


# ---- Version draft -> merged into the parent ------------------------------------------


async def test_publishing_a_version_draft_merges_it_into_the_parent(client, store):
    _, key = await user_with_key(client)
    parent = await publish_template(client, key)
    draft = await new_version_ok(client, key, parent["id"])
    new_definition = definition(agent("lead", prompt="Improved prompt."), agent("reviewer"))
    edited = await patch_ok(client, key, draft["id"], definition=new_definition, changeLog="added a reviewer")
    merged = await publish_ok(client, key, draft["id"])
    assert merged["id"] == parent["id"]
    assert merged["slug"] == parent["slug"]
    assert merged["status"] == "published"
    assert merged["version"] == 2
    assert merged["definition"] == edited["definition"]
    assert merged["changeLog"] == "added a reviewer"
    assert "parentTemplateId" not in merged
    assert (await get_template(client, draft["id"], key)).status == 404
    assert await store["templates"].count_documents({"_id": draft["id"]}) == 0
    assert await store["templates"].count_documents({"kind": "version_draft"}) == 0
    fetched = await (await get_template(client, parent["id"])).json()
    assert fetched["status"] == "published"
    assert fetched["version"] == 2
    assert fetched["definition"] == edited["definition"]
    assert await listed_ids(client) == [parent["id"]]
    history = await versions(client, parent["id"])
    assert [v["version"] for v in history] == [2, 1]
    assert history[0]["changeLog"] == "added a reviewer"


async def test_a_change_log_given_on_publish_is_recorded(client):
    _, key = await user_with_key(client)
    parent = await publish_template(client, key)
    merged = await release(
        client, key, parent["id"], definition(agent("lead", prompt="v2")), change_log="tightened the prompt"
    )
    assert merged["changeLog"] == "tightened the prompt"
    assert (await versions(client, parent["id"]))[0]["changeLog"] == "tightened the prompt"


# ---- Rollback -------------------------------------------------------------------------


async def test_rollback_opens_a_draft_preloaded_with_the_old_definition(client, store):
    _, key = await user_with_key(client)
    first = definition(agent("lead", prompt="first"))
    parent = await publish_template(client, key, definition=first)
    second = await release(client, key, parent["id"], definition(agent("lead", prompt="second")))
    response = await rollback(client, key, parent["id"], {"version": 1})
    assert response.status == 201, await response.text()
    draft = await response.json()
    assert draft["status"] == "draft"
    assert draft["id"] != parent["id"]
    assert draft["slug"] == parent["slug"]
    assert draft["parentId"] == parent["id"]
    assert draft["version"] == 3
    assert draft["definition"] == parent["definition"]
    assert draft["definition"]["agents"][0]["prompt"] == "first"
    live = await (await get_template(client, parent["id"])).json()
    assert live["status"] == "published" and live["version"] == 2
    assert live["definition"] == second["definition"]
    stored = await store["templates"].find_one({"_id": draft["id"]})
    assert stored["parentTemplateId"] == parent["id"]
    restored = await publish_ok(client, key, draft["id"])
    assert restored["id"] == parent["id"] and restored["version"] == 3
    assert restored["definition"]["agents"][0]["prompt"] == "first"


async def test_rollback_while_a_version_draft_is_active_is_409(client, store):
    _, key = await user_with_key(client)
    parent = await publish_template(client, key)
    open_draft = await new_version_ok(client, key, parent["id"])
    response = await rollback(client, key, parent["id"], {"version": 1})
    assert response.status == 409
    drafts = await store["templates"].find({"kind": "version_draft"}).to_list(None)
    assert [d["_id"] for d in drafts] == [open_draft["id"]]


@pytest.mark.parametrize("version", [2, 99])
async def test_rollback_to_a_version_without_a_snapshot_is_422(client, store, version):
    _, key = await user_with_key(client)
    parent = await publish_template(client, key)
    response = await rollback(client, key, parent["id"], {"version": version})
    assert response.status == 422
    assert set(await response.json()) == {"error"}
    assert await store["templates"].count_documents({"kind": "version_draft"}) == 0


@pytest.mark.parametrize("body", [{}, {"version": "1"}, {"version": 0}, {"version": -1}, {"version": 1.5}])
async def test_rollback_with_a_bad_body_is_400(client, store, body):
    _, key = await user_with_key(client)
    parent = await publish_template(client, key)
    response = await rollback(client, key, parent["id"], body)
    assert response.status == 400
    assert "version" in (await response.json())["error"]
    assert await store["templates"].count_documents({"kind": "version_draft"}) == 0


# ---- Fork -----------------------------------------------------------------------------


async def test_fork_gives_the_caller_a_private_team_draft(client, store):
    _, owner_key = await user_with_key(client)
    other, other_key = await user_with_key(client)
    original = await publish_template(client, owner_key, pricingModel="per_run", priceUsdCents=99)
    response = await fork(client, other_key, original["id"])
    assert response.status == 201, await response.text()
    copy = await response.json()
    assert copy["status"] == "draft"
    assert copy["visibility"] == "team"
    assert copy["forkedFromId"] == original["id"]
    assert copy["id"] != original["id"]
    assert copy["slug"] != original["slug"]
    assert copy["name"] == original["name"]
    assert copy["definition"] == original["definition"]
    stored = await store["templates"].find_one({"_id": copy["id"]})
    assert stored["owner"] == {"kind": "user", "id": other.id}
    assert (await get_template(client, copy["id"], other_key)).status == 200
    assert (await get_template(client, copy["id"], owner_key)).status == 404
    assert await listed_ids(client) == [original["id"]]
    edited = await patch_ok(client, other_key, copy["id"], name="My Copy")
    assert edited["name"] == "My Copy"
    assert (await (await get_template(client, original["id"])).json())["name"] == original["name"]


async def test_fork_of_a_non_forkable_template_is_403_except_for_its_owner(client, store):
    _, owner_key = await user_with_key(client)
    _, other_key = await user_with_key(client)
    original = await publish_template(client, owner_key, forkable=False)
    refused = await fork(client, other_key, original["id"])
    assert refused.status == 403
    assert await store["templates"].count_documents({"forkedFromId": original["id"]}) == 0
    allowed = await fork(client, owner_key, original["id"])
    assert allowed.status == 201, await allowed.text()
    assert (await allowed.json())["forkedFromId"] == original["id"]
    assert await store["templates"].count_documents({"forkedFromId": original["id"]}) == 1


async def test_fork_of_a_draft_a_version_draft_or_an_unknown_id_is_404(client, store):
    _, key = await user_with_key(client)
    draft = await create_template(client, key)
    parent = await publish_template(client, key)
    version_draft = await new_version_ok(client, key, parent["id"])
    for template_id in (draft["id"], version_draft["id"], "no-such-template"):
        response = await fork(client, key, template_id)
        assert response.status == 404, template_id
    assert await store["templates"].count_documents({"forkedFromId": {"$exists": True}}) == 0


# ---- Archive --------------------------------------------------------------------------


async def test_archive_delists_and_counts_active_installs(client, store):
    deployer = await signup(client)
    _, key = await user_with_key(client)
    parent = await publish_template(client, key)
    other = await publish_template(client, key)
    await seed_install(store, "i1", parent["id"], deployer.id, deployer.email, "completed")
    await seed_install(store, "i2", parent["id"], deployer.id, deployer.email, "pending")
    await seed_install(store, "i3", parent["id"], deployer.id, deployer.email, "cancelled")
    await seed_install(store, "i4", other["id"], deployer.id, deployer.email, "completed")
    response = await archive(client, key, parent["id"])
    assert response.status == 200, await response.text()
    archived = await response.json()
    assert archived["id"] == parent["id"] and archived["slug"] == parent["slug"]
    assert archived["status"] == "archived"
    assert archived["installCount"] == 2
    assert await listed_ids(client) == [other["id"]]
    assert await listed_ids(client, key) == [other["id"]]
    assert (await new_version(client, key, parent["id"])).status == 409
    assert await store["templates"].count_documents({"kind": "version_draft"}) == 0
    assert (await archive(client, key, parent["id"])).status == 409
    assert (await store["templates"].find_one({"_id": parent["id"]}))["status"] == "archived"
    assert await store.installs.count_documents({"templateId": parent["id"]}) == 3


async def test_archive_of_a_draft_or_a_version_draft_is_409(client, store):
    _, key = await user_with_key(client)
    draft = await create_template(client, key)
    parent = await publish_template(client, key)
    version_draft = await new_version_ok(client, key, parent["id"])
    for template_id in (draft["id"], version_draft["id"]):
        response = await archive(client, key, template_id)
        assert response.status == 409, template_id
    assert await store["templates"].count_documents({"status": "archived"}) == 0


# ---- Delete ---------------------------------------------------------------------------


async def test_delete_of_a_draft_and_of_a_version_draft_is_204(client, store):
    _, key = await user_with_key(client)
    draft = await create_template(client, key)
    parent = await publish_template(client, key)
    version_draft = await new_version_ok(client, key, parent["id"])
    for template_id in (draft["id"], version_draft["id"]):
        response = await delete(client, key, template_id)
        assert response.status == 204, template_id
        assert await response.read() == b""
        assert (await get_template(client, template_id, key)).status == 404
        assert await store["templates"].count_documents({"_id": template_id}) == 0
    live = await (await get_template(client, parent["id"])).json()
    assert live["status"] == "published" and live["version"] == 1
    assert (await new_version(client, key, parent["id"])).status == 201


async def test_delete_with_an_active_install_is_409_with_can_archive(client, store):
    deployer = await signup(client)
    _, key = await user_with_key(client)
    parent = await publish_template(client, key)
    await seed_install(store, "i1", parent["id"], deployer.id, deployer.email, "completed")
    response = await delete(client, key, parent["id"])
    assert response.status == 409
    body = await response.json()
    assert body["canArchive"] is True
    assert isinstance(body["error"], str) and body["error"]
    assert (await get_template(client, parent["id"])).status == 200
    assert await store["templates"].count_documents({"_id": parent["id"]}) == 1
    assert await store["template_versions"].count_documents({"templateId": parent["id"]}) == 1
    archived = await archive(client, key, parent["id"])
    assert archived.status == 200
    again = await delete(client, key, parent["id"])
    assert again.status == 409
    assert (await again.json())["canArchive"] is True
    assert await store["templates"].count_documents({"_id": parent["id"]}) == 1


async def test_delete_without_active_installs_removes_the_template_and_its_versions(client, store):
    deployer = await signup(client)
    _, key = await user_with_key(client)
    parent = await publish_template(client, key)
    await release(client, key, parent["id"], definition(agent("lead", prompt="v2")))
    open_draft = await new_version_ok(client, key, parent["id"])
    await seed_install(store, "i1", parent["id"], deployer.id, deployer.email, "cancelled")
    assert await store["template_versions"].count_documents({"templateId": parent["id"]}) == 2
    response = await delete(client, key, parent["id"])
    assert response.status == 204
    assert await response.read() == b""
    assert (await get_template(client, parent["id"], key)).status == 404
    assert (await client.get(f"/api/templates/{parent['id']}/versions")).status == 404
    assert await store["templates"].count_documents({"_id": {"$in": [parent["id"], open_draft["id"]]}}) == 0
    assert await store["template_versions"].count_documents({"templateId": parent["id"]}) == 0
    assert await listed_ids(client) == []


async def test_delete_of_an_archived_template_without_active_installs_is_204(client, store):
    _, key = await user_with_key(client)
    parent = await publish_template(client, key)
    assert (await archive(client, key, parent["id"])).status == 200
    response = await delete(client, key, parent["id"])
    assert response.status == 204
    assert await store["templates"].count_documents({}) == 0


# ---- Version history and semver -------------------------------------------------------


async def test_version_history_classifies_each_bump(client):
    _, key = await user_with_key(client)
    parent = await publish_template(client, key, definition=definition(agent("lead", prompt="v1")))
    assert parent["semver"] == "1.0.0"
    first = await versions(client, parent["id"])
    assert [(v["version"], v["semver"], v["bump"]) for v in first] == [(1, "1.0.0", "INITIAL")]
    patched = await release(client, key, parent["id"], definition(agent("lead", prompt="v1, clearer")))
    assert (patched["version"], patched["semver"]) == (2, "1.0.1")
    minor = await release(
        client, key, parent["id"], definition(agent("lead", prompt="v1, clearer"), agent("reviewer"))
    )
    assert (minor["version"], minor["semver"]) == (3, "1.1.0")
    major = await release(client, key, parent["id"], definition(agent("reviewer")))
    assert (major["version"], major["semver"]) == (4, "2.0.0")
    history = await versions(client, parent["id"])
    assert [(v["version"], v["semver"], v["bump"]) for v in history] == [
        (4, "2.0.0", "MAJOR"),
        (3, "1.1.0", "MINOR"),
        (2, "1.0.1", "PATCH"),
        (1, "1.0.0", "INITIAL"),
    ]
    assert all(isinstance(v["publishedAt"], str) for v in history)
    fetched = await (await get_template(client, parent["id"])).json()
    assert (fetched["version"], fetched["semver"]) == (4, "2.0.0")


async def test_removing_a_required_variable_is_a_major_bump(client):
    _, key = await user_with_key(client)
    team = definition(agent("lead", prompt="Serve {{region}}."), requiredVariables=["region"])
    parent = await publish_template(client, key, definition=team)
    merged = await release(client, key, parent["id"], definition(agent("lead", prompt="Serve everyone.")))
    assert merged["semver"] == "2.0.0"
    history = await versions(client, parent["id"])
    assert [(v["version"], v["bump"]) for v in history] == [(2, "MAJOR"), (1, "INITIAL")]


async def test_a_major_publish_mails_each_deployer_with_an_active_install(client, store):
    first = await signup(client)
    second = await signup(client)
    gone = await signup(client)
    _, key = await user_with_key(client)
    parent = await publish_template(client, key, definition=definition(agent("lead"), agent("helper")))
    other = await publish_template(client, key)
    await seed_install(store, "i1", parent["id"], first.id, first.email, "completed")
    await seed_install(store, "i2", parent["id"], first.id, first.email, "pending")
    await seed_install(store, "i3", parent["id"], second.id, second.email, "completed")
    await seed_install(store, "i4", parent["id"], gone.id, gone.email, "cancelled")
    await seed_install(store, "i5", other["id"], gone.id, gone.email, "completed")
    merged = await release(client, key, parent["id"], definition(agent("lead")), change_log="dropped helper")
    assert merged["semver"] == "2.0.0"
    mails = await major_mails(store)
    assert sorted(m["to"] for m in mails) == sorted([first.email, second.email])
    for mail in mails:
        assert mail["kind"] == MAIL_KIND
        assert parent["name"] in mail["subject"]


async def test_minor_and_patch_publishes_send_no_mail(client, store):
    deployer = await signup(client)
    _, key = await user_with_key(client)
    parent = await publish_template(client, key)
    await seed_install(store, "i1", parent["id"], deployer.id, deployer.email, "completed")
    minor = await release(client, key, parent["id"], definition(agent("lead"), agent("extra")))
    assert minor["semver"] == "1.1.0"
    patched = await release(client, key, parent["id"], definition(agent("lead", prompt="x"), agent("extra")))
    assert patched["semver"] == "1.1.1"
    assert await major_mails(store) == []
    major = await release(client, key, parent["id"], definition(agent("lead")))
    assert major["semver"] == "2.0.0"
    assert [m["to"] for m in await major_mails(store)] == [deployer.email]


async def test_a_major_publish_mails_one_deployer_once(client, store):
    deployer = await signup(client)
    _, key = await user_with_key(client)
    parent = await publish_template(client, key, definition=definition(agent("lead"), agent("helper")))
    await seed_install(store, "i1", parent["id"], deployer.id, "d@example.com", "completed")
    await release(client, key, parent["id"], definition(agent("lead")))
    mails = await major_mails(store)
    assert len(mails) == 1
    assert mails[0]["to"] == deployer.email, "the deploying account's address wins over the billing one"


async def test_patch_nulls_leave_required_fields_alone_and_clear_only_price_and_change_log(client):
    _, key = await user_with_key(client)
    draft = await create_template(client, key, name="Keep me", pricingModel="per_run", priceUsdCents=40)
    updated = await patch_ok(client, key, draft["id"], name=None, visibility=None, changeLog="notes")
    assert updated["name"] == "Keep me" and updated["visibility"] == draft["visibility"]
    assert updated["changeLog"] == "notes"
    updated = await patch_ok(client, key, draft["id"], changeLog=None, pricingModel="free")
    assert updated["changeLog"] is None
    assert (updated["pricingModel"], updated["priceUsdCents"]) == ("free", None)
    response = await patch(client, key, draft["id"], pricingModel="per_k_tokens")
    assert response.status == 400
    assert (await response.json())["error"].startswith("priceUsdCents:")
