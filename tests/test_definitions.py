"""Team definition and pricing validation over POST /api/templates: 400s that name the path
(spec "Team definition", "Agent", "AccessPolicy", "Template"), and nothing written on a refusal."""

from __future__ import annotations

import pytest

from tests.support.accounts import bearer
from tests.support.templates import agent, definition, template_body, user_with_key


def with_policy(policy=None, **rule):
    """A definition whose second agent carries an access policy (one rule from `rule`)."""
    if policy is None:
        policy = {"accessPolicyVersion": "1", "rules": [rule]}
    return definition(agent("lead"), agent("fetcher", accessPolicy=policy))


def allow(**match):
    return {"match": match, "action": "allow"}


async def post(client, key, **fields):
    return await client.post("/api/templates", json=template_body(**fields), headers=bearer(key))


async def refused(client, store, key, **fields):
    """POST, assert 400 and that nothing was written; returns the error message."""
    response = await post(client, key, **fields)
    assert response.status == 400, await response.text()
    body = await response.json()
    assert set(body) == {"error"}
    assert await store["templates"].count_documents({}) == 0
    return str(body["error"])


async def accepted(client, store, key, **fields):
    response = await post(client, key, **fields)
    assert response.status == 201, await response.text()
    created = await response.json()
    assert await store["templates"].count_documents({"_id": created["id"]}) == 1
    return created


async def test_an_unknown_model_names_the_agent_path(client, store):
    _, key = await user_with_key(client)
    team = definition(agent("lead"), agent("writer", model="providerZ:huge"))
    message = await refused(client, store, key, definition=team)
    assert message.startswith("definition.agents[1].model")


async def test_every_catalogue_model_is_accepted(client, store):
    _, key = await user_with_key(client)
    models = [
        "providerA:high",
        "providerA:middle",
        "providerA:small",
        "providerB:standard",
        "providerB:reasoning-small",
        "providerB:code-small",
        "providerC:pro",
        "providerC:flash",
    ]
    team = definition(*(agent(f"a{n}", model=model) for n, model in enumerate(models)))
    created = await accepted(client, store, key, definition=team)
    assert [a["model"] for a in created["definition"]["agents"]] == models


async def test_duplicate_agent_keys_are_refused(client, store):
    _, key = await user_with_key(client)
    message = await refused(client, store, key, definition=definition(agent("lead"), agent("lead")))
    assert message.startswith("definition.agents[1].key")
    assert "lead" in message


async def test_an_undeclared_variable_names_the_agent_and_the_variable(client, store):
    _, key = await user_with_key(client)
    team = definition(
        agent("lead", prompt="Use {{region}}."),
        agent("writer", prompt="Hi {{undeclared}}!"),
        requiredVariables=["region"],
    )
    message = await refused(client, store, key, definition=team)
    assert message.startswith("definition.agents[1].prompt")
    assert "writer" in message
    assert "undeclared" in message


async def test_a_declared_variable_is_accepted(client, store):
    _, key = await user_with_key(client)
    team = definition(
        agent("lead", prompt="Serve {{ region }} in {{tone}}."), requiredVariables=["region", "tone"]
    )
    created = await accepted(client, store, key, definition=team)
    assert created["definition"]["requiredVariables"] == ["region", "tone"]


@pytest.mark.parametrize(
    "policy",
    [
        {"defaultAction": "deny", "rules": []},
        {"accessPolicyVersion": "2"},
        {"accessPolicyVersion": 1},
    ],
)
async def test_an_access_policy_needs_version_1(client, store, policy):
    _, key = await user_with_key(client)
    message = await refused(client, store, key, definition=with_policy(policy))
    assert message.startswith("definition.agents[1].accessPolicy.accessPolicyVersion")


async def test_a_rule_action_must_be_allow_deny_or_require_approval(client, store):
    _, key = await user_with_key(client)
    message = await refused(client, store, key, definition=with_policy(action="block"))
    assert message.startswith("definition.agents[1].accessPolicy.rules[0].action")


@pytest.mark.parametrize("action", ["allow", "deny", "require_approval"])
async def test_each_rule_action_is_accepted(client, store, action):
    _, key = await user_with_key(client)
    created = await accepted(client, store, key, definition=with_policy(action=action))
    assert created["definition"]["agents"][1]["accessPolicy"]["rules"][0]["action"] == action


@pytest.mark.parametrize("host", ["a.*.com", "*example.com", "*", "api.*", "exa mple.com", "**.example.com"])
async def test_a_wildcard_is_allowed_only_as_a_leading_label(client, store, host):
    _, key = await user_with_key(client)
    message = await refused(client, store, key, definition=with_policy(**allow(host=host)))
    assert message.startswith("definition.agents[1].accessPolicy.rules[0].match.host")


@pytest.mark.parametrize("host", ["*.example.com", "api.example.com", "localhost"])
async def test_plain_and_leading_wildcard_hosts_are_accepted(client, store, host):
    _, key = await user_with_key(client)
    created = await accepted(client, store, key, definition=with_policy(**allow(host=host)))
    assert created["definition"]["agents"][1]["accessPolicy"]["rules"][0]["match"]["host"] == host


async def test_an_unknown_method_is_refused(client, store):
    _, key = await user_with_key(client)
    message = await refused(client, store, key, definition=with_policy(**allow(methods=["GET", "FETCH"])))
    assert message.startswith("definition.agents[1].accessPolicy.rules[0].match.methods[1]")


async def test_a_path_prefix_must_start_with_a_slash(client, store):
    _, key = await user_with_key(client)
    message = await refused(client, store, key, definition=with_policy(**allow(pathPrefix="v1/items")))
    assert message.startswith("definition.agents[1].accessPolicy.rules[0].match.pathPrefix")


async def test_a_full_rule_is_accepted(client, store):
    _, key = await user_with_key(client)
    rule = {
        "match": {"host": "*.example.com", "methods": ["GET", "POST"], "pathPrefix": "/v1"},
        "action": "deny",
        "reason": "no writes",
    }
    policy = {"accessPolicyVersion": "1", "defaultAction": "deny", "rules": [rule, {"action": "allow"}]}
    created = await accepted(client, store, key, definition=with_policy(policy))
    stored = created["definition"]["agents"][1]["accessPolicy"]
    assert stored["defaultAction"] == "deny"
    assert stored["rules"][0] == rule
    assert stored["rules"][1]["action"] == "allow"


async def test_a_gate_after_no_agent_is_refused(client, store):
    _, key = await user_with_key(client)
    team = definition(
        agent("lead"),
        agent("writer"),
        gates=[{"name": "review", "after": "lead"}, {"name": "ship", "after": "ghost"}],
    )
    message = await refused(client, store, key, definition=team)
    assert message.startswith("definition.gates[1].after")
    assert "ghost" in message


async def test_a_gate_after_an_agent_is_accepted(client, store):
    _, key = await user_with_key(client)
    team = definition(agent("lead"), gates=[{"name": "review", "after": "lead", "kind": "approval"}])
    created = await accepted(client, store, key, definition=team)
    assert created["definition"]["gates"][0]["after"] == "lead"


@pytest.mark.parametrize(
    "agents",
    [
        [agent("a", reportsTo="b"), agent("b", reportsTo="a")],
        [agent("a", reportsTo="c"), agent("b", reportsTo="a"), agent("c", reportsTo="b")],
        [agent("a", reportsTo="a")],
    ],
)
async def test_a_reporting_cycle_is_refused(client, store, agents):
    _, key = await user_with_key(client)
    message = await refused(client, store, key, definition=definition(*agents))
    assert message.startswith("definition.agents[")
    assert "reportsTo" in message


async def test_a_reporting_tree_is_accepted(client, store):
    _, key = await user_with_key(client)
    team = definition(agent("boss"), agent("a", reportsTo="boss"), agent("b", reportsTo="a"))
    await accepted(client, store, key, definition=team)


async def test_a_team_needs_at_least_one_agent(client, store):
    _, key = await user_with_key(client)
    message = await refused(client, store, key, definition=definition(agents=[]))
    assert message.startswith("definition.agents")


@pytest.mark.parametrize(
    ("pricing", "field"),
    [
        ({"pricingModel": "per_run"}, "priceUsdCents"),
        ({"pricingModel": "per_k_tokens", "priceUsdCents": None}, "priceUsdCents"),
        ({"pricingModel": "free", "priceUsdCents": 100}, "priceUsdCents"),
        ({"pricingModel": "per_run", "priceUsdCents": -5}, "priceUsdCents"),
        ({"pricingModel": "per_run", "priceUsdCents": 0}, "priceUsdCents"),
        ({"pricingModel": "per_run", "priceUsdCents": "5"}, "priceUsdCents"),
        ({"pricingModel": "subscription", "priceUsdCents": 5}, "pricingModel"),
    ],
)
async def test_bad_pricing_is_refused(client, store, pricing, field):
    _, key = await user_with_key(client)
    message = await refused(client, store, key, **pricing)
    assert field in message


@pytest.mark.parametrize(
    ("pricing", "expected"),
    [
        ({"pricingModel": "per_k_tokens", "priceUsdCents": 5}, ("per_k_tokens", 5)),
        ({"pricingModel": "per_run", "priceUsdCents": 250}, ("per_run", 250)),
        ({"pricingModel": "free"}, ("free", None)),
        ({}, ("free", None)),
    ],
)
async def test_good_pricing_is_accepted(client, store, pricing, expected):
    _, key = await user_with_key(client)
    created = await accepted(client, store, key, **pricing)
    assert (created["pricingModel"], created["priceUsdCents"]) == expected
    stored = await store["templates"].find_one({"_id": created["id"]})
    assert (stored["pricingModel"], stored["priceUsdCents"]) == expected


async def test_a_bad_definition_in_a_patch_leaves_the_draft_unchanged(client, store):
    _, key = await user_with_key(client)
    created = await accepted(client, store, key)
    before = await store["templates"].find_one({"_id": created["id"]})
    bad = definition(agent("lead"), agent("lead"))
    response = await client.patch(
        f"/api/templates/{created['id']}", json={"definition": bad}, headers=bearer(key)
    )
    assert response.status == 400
    assert (await response.json())["error"].startswith("definition.agents[1].key")
    assert await store["templates"].find_one({"_id": created["id"]}) == before
