"""POST /api/templates/validate and the template list's search, over real HTTP (issue 37, item 12).

Validation answers errors at their paths and, for an agent whose model's provider has no key on
this server, a warning: the definition stays valid and publishes (the spec allows it); only
this server cannot run it. The same `Definitions` gives the editor its starting model.
"""

from __future__ import annotations

from svc.templates import Definitions
from tests.support.accounts import bearer
from tests.support.runtime import provider_settings
from tests.support.templates import agent, definition, listed_ids, publish_template, user_with_key

VALIDATE = "/api/templates/validate"


async def test_validate_warns_about_a_provider_this_server_has_no_key_for(make_client):
    client = await make_client(rate_limit_multiplier=None, providers=provider_settings("http://127.0.0.1:9"))
    _, key = await user_with_key(client)
    team = definition(agent("lead"), agent("coder", model="providerB:code-small", reportsTo="lead"))
    response = await client.post(VALIDATE, json={"definition": team}, headers=bearer(key))
    assert response.status == 200, await response.text()
    report = await response.json()
    assert report["valid"] is True and report["errors"] == []
    assert [w["path"] for w in report["warnings"]] == ["definition.agents[1].model"]
    assert "providerB is not configured on this server" in report["warnings"][0]["message"]
    assert "SVC_PROVIDERB_API_KEY" in report["warnings"][0]["message"]
    # Valid per the spec, so never refused: it publishes, warning or not.
    published = await publish_template(client, key, definition=team)
    assert published["status"] == "published"


async def test_validate_reports_errors_at_their_paths_and_refuses_a_non_object(make_client):
    client = await make_client(rate_limit_multiplier=None, providers=provider_settings("http://127.0.0.1:9"))
    _, key = await user_with_key(client)
    broken = definition(agent("lead", model="providerZ:huge"), agent("lead"))
    report = await (await client.post(VALIDATE, json={"definition": broken}, headers=bearer(key))).json()
    assert report["valid"] is False and report["warnings"] == []
    assert report["errors"][0]["path"] == "definition.agents[0].model"
    clash = definition(agent("lead"), agent("lead"))
    report = await (await client.post(VALIDATE, json={"definition": clash}, headers=bearer(key))).json()
    assert report["valid"] is False and report["errors"][0]["path"].startswith("definition.agents[1]")
    wrong = await client.post(VALIDATE, json={"definition": ["not", "an", "object"]}, headers=bearer(key))
    assert wrong.status == 400 and (await wrong.json())["error"].startswith("definition:")
    assert (await client.post(VALIDATE, json={"definition": {}})).status == 401


def test_the_starting_model_is_one_this_server_can_run():
    assert Definitions({"providerB"}).starter()["agents"][0]["model"] == "providerB:standard"
    assert Definitions({"providerC", "providerB"}).starter_model() == "providerB:standard"
    assert Definitions({"providerA", "providerC"}).starter_model() == "providerA:small"
    assert Definitions({"providerC"}).starter_model() == "providerC:flash"
    # Nothing configured: the catalogue's everyday model, and the editor warns about it at once.
    nothing = Definitions(set())
    assert nothing.starter_model() == "providerA:small"
    assert nothing.check(nothing.starter()).warnings


async def test_the_public_list_searches_names_slugs_and_descriptions(make_client):
    client = await make_client(rate_limit_multiplier=None)
    _, key = await user_with_key(client)
    hay = await publish_template(client, key, name="Haystack Team", description="finds needles")
    other = await publish_template(client, key, name="Other", description="nothing (to) see [here]")
    assert await listed_ids(client, q="HAYSTACK") == [hay["id"]]
    assert await listed_ids(client, q="needles") == [hay["id"]]
    assert await listed_ids(client, q=other["slug"]) == [other["id"]]
    # The text is matched as typed: no regular-expression operator reaches the database.
    assert await listed_ids(client, q="(to) see [here]") == [other["id"]]
    assert await listed_ids(client, q=".*") == []
    too_long = await client.get("/api/templates", params={"q": "x" * 201})
    assert too_long.status == 400 and (await too_long.json())["error"].startswith("q:")
