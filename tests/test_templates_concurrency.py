"""Concurrent lifecycle requests over real HTTP: every transition has exactly one winner
(spec "Template lifecycle"; "one active version draft per template")."""

from __future__ import annotations

import asyncio
from collections import Counter

from tests.support.accounts import bearer
from tests.support.templates import (
    agent,
    create_template,
    definition,
    get_template,
    new_version,
    new_version_ok,
    patch_ok,
    publish,
    publish_template,
    template_body,
    user_with_key,
    versions,
)

N = 10


async def statuses(responses):
    for response in responses:
        await response.read()
    return Counter(response.status for response in responses)


async def test_concurrent_publishes_of_a_version_draft_have_one_winner(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    _, key = await user_with_key(client)
    parent = await publish_template(client, key)
    draft = await new_version_ok(client, key, parent["id"])
    await patch_ok(client, key, draft["id"], definition=definition(agent("lead"), agent("extra")))
    responses = await asyncio.gather(*(publish(client, key, draft["id"]) for _ in range(N)))
    counts = await statuses(responses)
    assert counts == Counter({200: 1, 404: N - 1}), counts
    winner = next(r for r in responses if r.status == 200)
    merged = await winner.json()
    assert merged["id"] == parent["id"] and merged["version"] == 2
    live = await (await get_template(client, parent["id"])).json()
    assert live["version"] == 2
    assert live["semver"] == "1.1.0"
    assert [v["version"] for v in await versions(client, parent["id"])] == [2, 1]
    assert await store["template_versions"].count_documents({"templateId": parent["id"]}) == 2
    assert await store["templates"].count_documents({"kind": "version_draft"}) == 0


async def test_every_losing_publish_of_a_version_draft_is_404(make_client, store):
    """The merged draft's record is deleted (spec), so its id is unknown to every other publish,
    whether it raced the winner or came later."""
    client = await make_client(rate_limit_multiplier=None)
    _, key = await user_with_key(client)
    parent = await publish_template(client, key)
    draft = await new_version_ok(client, key, parent["id"])
    responses = list(await asyncio.gather(*(publish(client, key, draft["id"]) for _ in range(N))))
    late = await publish(client, key, draft["id"])
    assert await late.json() == {"error": "Template not found"}
    responses.append(late)
    assert await statuses(responses) == Counter({200: 1, 404: N})
    assert (await (await get_template(client, parent["id"])).json())["version"] == 2


async def test_concurrent_new_versions_open_one_draft(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    _, key = await user_with_key(client)
    parent = await publish_template(client, key)
    responses = await asyncio.gather(*(new_version(client, key, parent["id"]) for _ in range(N)))
    assert await statuses(responses) == Counter({201: 1, 409: N - 1})
    winner = await next(r for r in responses if r.status == 201).json()
    drafts = await store["templates"].find({"parentTemplateId": parent["id"]}).to_list(None)
    assert [d["_id"] for d in drafts] == [winner["id"]]
    assert drafts[0]["kind"] == "version_draft" and drafts[0]["version"] == 2


async def test_concurrent_creates_with_one_slug_have_one_winner(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    _, key = await user_with_key(client)
    bodies = [template_body(slug="contested", name=f"Team {n}") for n in range(N)]
    responses = await asyncio.gather(
        *(client.post("/api/templates", json=body, headers=bearer(key)) for body in bodies)
    )
    assert await statuses(responses) == Counter({201: 1, 409: N - 1})
    winner = await next(r for r in responses if r.status == 201).json()
    docs = await store["templates"].find({"slug": "contested"}).to_list(None)
    assert [d["_id"] for d in docs] == [winner["id"]]
    assert docs[0]["name"] == winner["name"]


async def test_concurrent_publishes_of_a_draft_have_one_winner(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    _, key = await user_with_key(client)
    draft = await create_template(client, key)
    responses = await asyncio.gather(*(publish(client, key, draft["id"]) for _ in range(N)))
    assert await statuses(responses) == Counter({200: 1, 409: N - 1})
    winner = await next(r for r in responses if r.status == 200).json()
    live = await (await get_template(client, draft["id"])).json()
    assert live["status"] == "published" and live["version"] == 1
    assert live["publishedAt"] == winner["publishedAt"]
    history = await versions(client, draft["id"])
    assert [(v["version"], v["bump"]) for v in history] == [(1, "INITIAL")]
