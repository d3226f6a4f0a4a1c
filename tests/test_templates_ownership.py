"""Who may see and change a template, what the create body may not set, and the public list's
pagination (spec "Templates and authoring", "Errors", PATCH /api/billing/pricing)."""

from __future__ import annotations

import itertools

import pytest

from tests.support.accounts import bearer
from tests.support.templates import (
    agent,
    create_template,
    definition,
    get_template,
    listed_ids,
    new_version_ok,
    publish_ok,
    publish_template,
    template_body,
    user_with_key,
)


async def send(client, key, method, path, body=None):
    return await client.request(method, path, json=body, headers=bearer(key))


def mutations(template_id):
    """Every changing call on one template: (method, path, body)."""
    return [
        ("PATCH", f"/api/templates/{template_id}", {"name": "hijacked"}),
        ("POST", f"/api/templates/{template_id}/publish", {}),
        ("POST", f"/api/templates/{template_id}/new-version", None),
        ("POST", f"/api/templates/{template_id}/archive", None),
        ("POST", f"/api/templates/{template_id}/rollback", {"version": 1}),
        (
            "PATCH",
            "/api/billing/pricing",
            {"templateId": template_id, "pricingModel": "per_run", "priceUsdCents": 500},
        ),
        ("DELETE", f"/api/templates/{template_id}", None),
    ]


async def test_another_users_draft_is_404_everywhere(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    _, owner_key = await user_with_key(client)
    _, other_key = await user_with_key(client)
    draft = await create_template(client, owner_key, name="Secret")
    before = await store["templates"].find_one({"_id": draft["id"]})
    assert (await get_template(client, draft["id"], other_key)).status == 404
    assert (await get_template(client, draft["id"])).status == 404
    history = await client.get(f"/api/templates/{draft['id']}/versions", headers=bearer(other_key))
    assert history.status == 404
    for method, path, body in mutations(draft["id"]):
        response = await send(client, other_key, method, path, body)
        assert response.status == 404, (method, path, await response.text())
    assert await store["templates"].find_one({"_id": draft["id"]}) == before
    assert await store["templates"].count_documents({}) == 1


async def test_another_users_published_template_is_403_for_changes(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    _, owner_key = await user_with_key(client)
    _, other_key = await user_with_key(client)
    parent = await publish_template(client, owner_key, name="Public Team")
    before = await store["templates"].find_one({"_id": parent["id"]})
    assert (await get_template(client, parent["id"], other_key)).status == 200
    for method, path, body in mutations(parent["id"]):
        response = await send(client, other_key, method, path, body)
        assert response.status == 403, (method, path, await response.text())
        assert set(await response.json()) == {"error"}
    assert await store["templates"].find_one({"_id": parent["id"]}) == before
    assert await store["templates"].count_documents({}) == 1
    assert await store["template_versions"].count_documents({}) == 1


async def test_another_users_version_draft_is_404(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    _, owner_key = await user_with_key(client)
    _, other_key = await user_with_key(client)
    parent = await publish_template(client, owner_key)
    draft = await new_version_ok(client, owner_key, parent["id"])
    before = await store["templates"].find_one({"_id": draft["id"]})
    assert (await get_template(client, draft["id"], other_key)).status == 404
    calls = [
        ("PATCH", f"/api/templates/{draft['id']}", {"definition": definition(agent("intruder"))}),
        ("POST", f"/api/templates/{draft['id']}/publish", {}),
        ("PATCH", "/api/billing/pricing", {"templateId": draft["id"], "pricingModel": "free"}),
        ("DELETE", f"/api/templates/{draft['id']}", None),
    ]
    for method, path, body in calls:
        response = await send(client, other_key, method, path, body)
        assert response.status == 404, (method, path, await response.text())
    assert await store["templates"].find_one({"_id": draft["id"]}) == before
    live = await (await get_template(client, parent["id"])).json()
    assert live["version"] == 1


async def test_owner_can_set_pricing_on_draft_and_published(client, store):
    _, key = await user_with_key(client)
    draft = await create_template(client, key)
    parent = await publish_template(client, key)
    for template_id in (draft["id"], parent["id"]):
        body = {"templateId": template_id, "pricingModel": "per_k_tokens", "priceUsdCents": 7}
        response = await client.patch("/api/billing/pricing", json=body, headers=bearer(key))
        assert response.status == 200, await response.text()
        answer = await response.json()
        # A published template's new price waits for the next period (docs/billing.md).
        assert (answer.pop("effectiveFrom") is None) == (template_id == draft["id"])
        assert answer == {
            "id": template_id,
            "pricingModel": "per_k_tokens",
            "priceUsdCents": 7,
            "envelopeFeePercent": 10,
        }
        stored = await store["templates"].find_one({"_id": template_id})
        assert (stored["pricingModel"], stored["priceUsdCents"]) == ("per_k_tokens", 7)


async def test_a_team_template_is_visible_only_to_its_owner(make_client):
    client = await make_client(rate_limit_multiplier=None)
    _, owner_key = await user_with_key(client)
    _, other_key = await user_with_key(client)
    private = await publish_template(client, owner_key, visibility="team")
    public = await publish_template(client, owner_key, visibility="public")
    assert await listed_ids(client) == [public["id"]]
    assert await listed_ids(client, other_key) == [public["id"]]
    assert sorted(await listed_ids(client, owner_key)) == sorted([private["id"], public["id"]])
    assert (await get_template(client, private["id"], other_key)).status == 404
    assert (await get_template(client, private["id"])).status == 404
    assert (await get_template(client, private["id"], owner_key)).status == 200
    fork = await client.post(f"/api/templates/{private['id']}/fork", headers=bearer(other_key))
    assert fork.status == 404


async def test_create_ignores_fields_the_caller_may_not_set(client, store):
    caller, key = await user_with_key(client)
    _, other_key = await user_with_key(client)
    body = template_body(
        owner={"kind": "user", "id": "someone-else"},
        status="published",
        version=7,
        publishedAt="2020-01-01T00:00:00Z",
        parentTemplateId="x",
        forkedFromId="y",
        kind="version_draft",
        id="chosen-id",
        _id="chosen-id",
    )
    response = await client.post("/api/templates", json=body, headers=bearer(key))
    assert response.status == 201, await response.text()
    created = await response.json()
    assert created["status"] == "draft"
    assert created["version"] == 1
    assert created["publishedAt"] is None
    assert created["id"] != "chosen-id"
    assert "parentTemplateId" not in created and "forkedFromId" not in created
    stored = await store["templates"].find_one({"_id": created["id"]})
    assert stored["owner"] == {"kind": "user", "id": caller.id}
    assert stored["kind"] == "template"
    assert stored["status"] == "draft" and stored["version"] == 1 and stored["publishedAt"] is None
    assert await listed_ids(client) == []
    assert (await get_template(client, created["id"], other_key)).status == 404
    published = await publish_ok(client, key, created["id"])
    assert published["version"] == 1


async def test_an_invalid_bearer_on_the_list_is_401(client):
    for token in ("not-a-key", "svc_live_" + "0" * 32):
        response = await client.get("/api/templates", headers=bearer(token))
        assert response.status == 401
        assert await response.json() == {"error": "Invalid API key"}


async def test_the_list_paginates_newest_first(make_client):
    client = await make_client(rate_limit_multiplier=None)
    _, key = await user_with_key(client)
    created = [(await publish_template(client, key, name=f"Team {n}"))["id"] for n in range(5)]
    first = await client.get("/api/templates", params={"limit": "2"})
    assert first.status == 200
    page = await first.json()
    assert len(page["templates"]) == 2
    assert isinstance(page["nextCursor"], str) and page["nextCursor"]
    seen, stamps, cursor, pages = [], [], None, 0
    while True:
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        response = await client.get("/api/templates", params=params)
        assert response.status == 200, await response.text()
        body = await response.json()
        pages += 1
        assert len(body["templates"]) <= 2
        seen += [t["id"] for t in body["templates"]]
        stamps += [t["publishedAt"] for t in body["templates"]]
        cursor = body["nextCursor"]
        if cursor is None:
            break
        assert pages < 10
    assert pages == 3
    assert sorted(seen) == sorted(created)
    assert len(seen) == len(set(seen)) == 5
    assert stamps == sorted(stamps, reverse=True)
    by_stamp = dict(zip(seen, stamps, strict=True))
    for older, newer in itertools.pairwise(created):
        if by_stamp[older] != by_stamp[newer]:
            assert seen.index(newer) < seen.index(older)
    everything = await client.get("/api/templates")
    assert [t["id"] for t in (await everything.json())["templates"]] == seen


async def test_the_owners_list_pages_public_and_own_team_templates_through_ties(make_client, store):
    """One query per scope and per side of the cursor (svc/templates/reading.py), merged: every
    template once, newest first, ties at one publication time ordered by id across pages."""
    client = await make_client(rate_limit_multiplier=None)
    _, key = await user_with_key(client)
    _, stranger = await user_with_key(client)
    made = [
        (await publish_template(client, key, visibility="team" if n % 2 else "public"))["id"]
        for n in range(7)
    ]
    tie = (await store["templates"].find_one({"_id": made[3]}))["publishedAt"]
    await store["templates"].update_many({"_id": {"$in": made[1:6]}}, {"$set": {"publishedAt": tie}})
    stored = await store["templates"].find({"_id": {"$in": made}}).to_list(None)
    expected = [d["_id"] for d in sorted(stored, key=lambda d: (d["publishedAt"], d["_id"]), reverse=True)]

    async def pages(token: str | None) -> list[str]:
        seen, cursor = [], None
        for _ in range(10):
            params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
            headers = bearer(token) if token else {}
            body = await (await client.get("/api/templates", params=params, headers=headers)).json()
            seen += [t["id"] for t in body["templates"] if t["id"] in made]
            if (cursor := body["nextCursor"]) is None:
                return seen
        raise AssertionError("the list did not end")

    assert await pages(key) == expected
    public = [template_id for template_id in expected if made.index(template_id) % 2 == 0]
    assert await pages(stranger) == public and await pages(None) == public


@pytest.mark.parametrize(
    "query",
    [
        {"limit": "0"},
        {"limit": "101"},
        {"limit": "abc"},
        {"limit": "-1"},
        {"cursor": "garbage"},
        {"cursor": "Z2FyYmFnZQ=="},
    ],
)
async def test_bad_list_queries_are_400(client, query):
    response = await client.get("/api/templates", params=query)
    assert response.status == 400
    assert next(iter(query)) in (await response.json())["error"]


async def test_limit_100_is_accepted(client):
    response = await client.get("/api/templates", params={"limit": "100"})
    assert response.status == 200
    assert await response.json() == {"templates": [], "nextCursor": None}
