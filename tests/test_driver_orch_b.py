"""The orchB (Relevance AI) driver against a fake upstream over real HTTP on loopback."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from config.catalogue import UPSTREAM
from plugins.manager import Plugins
from plugins.types import (
    DeprovisionContext,
    PlatformError,
    PollContext,
    ProvisionContext,
    ProvisionResult,
    RunReport,
)
from tests.fakes.orch_b import FakeOrchB, create_app

DEFINITION: dict[str, Any] = {
    "version": "v1",
    "agents": [
        {"key": "lead", "name": "Lead", "model": "providerB:standard", "prompt": "You lead the team."},
        {"key": "writer", "name": "Writer", "model": "providerA:small", "prompt": "You write drafts."},
        {"key": "editor", "name": "Editor", "model": "providerC:flash", "prompt": "You edit drafts."},
    ],
}
INGEST_URL = "https://svc.example.com/api/runs/ingest"


def make_plugins() -> Plugins:
    """The managed runtime and this driver only, so the test does not depend on sibling drivers."""
    return Plugins(builtins=("plugins.builtin.svc_platform", "plugins.builtin.orch_b"))


def credentials(fake: FakeOrchB, **overrides: str) -> dict[str, str]:
    """Credentials the fake accepts."""
    return {"projectId": fake.project_id, "apiKey": fake.api_key, "region": "f1db6c", **overrides}


def provision_context(fake: FakeOrchB, allow_private: bool = True, **options: Any) -> ProvisionContext:
    """A provisioning context for DEFINITION."""
    return ProvisionContext(
        install_id="inst-1",
        platform="orchB",
        template={"id": "tpl-1"},
        definition=DEFINITION,
        credentials=credentials(fake),
        secrets={},
        options=options,
        install_token="svc_install_tok",
        runtime_webhook_url="https://svc.example.com/api/runtime/webhook",
        webhook_secret="whsec",
        ingest_url=INGEST_URL,
        allow_private=allow_private,
    )


def deprovision_context(fake: FakeOrchB, result: ProvisionResult) -> DeprovisionContext:
    """A deprovisioning context for what a provisioning made."""
    return DeprovisionContext(
        install_id="inst-1",
        platform="orchB",
        credentials=credentials(fake),
        deployed_agents=result.deployed_agents,
        state=result.state,
        options={},
        allow_private=True,
    )


def poll_context(fake: FakeOrchB, result: ProvisionResult, since: str | None) -> PollContext:
    """A polling context for what a provisioning made."""
    return PollContext(
        install_id="inst-1",
        platform="orchB",
        credentials=credentials(fake),
        deployed_agents=result.deployed_agents,
        since=since,
        allow_private=True,
    )


@pytest.fixture
async def fake(aiohttp_server, monkeypatch) -> FakeOrchB:
    """A running fake upstream; SVC_ORCHB_BASE_URL points at it."""
    state = FakeOrchB()
    server = await aiohttp_server(create_app(state))
    monkeypatch.setenv("SVC_ORCHB_BASE_URL", str(server.make_url("/latest")))
    return state


# ---- platform info and validation -----------------------------------------------------


def test_platform_info():
    info = make_plugins().platform("orchB")
    assert info is not None
    assert info.label == "Relevance AI"
    assert [(f.key, f.type, f.required) for f in info.credential_fields] == [
        ("projectId", "text", True),
        ("apiKey", "password", True),
        ("region", "text", True),
    ]
    assert info.capabilities.maxHierarchyDepth is None
    assert info.capabilities.supportedModels is None
    assert info.capabilities.billingCompleteness == "none"
    assert info.capabilities.provisioningModel == "rest"
    assert info.accepts == frozenset({"credentials", "variables", "model"})
    assert "secrets" not in info.accepts
    assert info.listed


async def test_no_hook_of_this_driver_is_asked_about_another_platform():
    """orchB, registered last, is asked first by pluggy; the manager still sends orchA's and the
    poller's questions only to the plugin that declared the platform."""
    plugins = Plugins(builtins=("plugins.builtin.orch_a", "plugins.builtin.orch_b"))
    problems = await plugins.validate_install("orchA", {}, DEFINITION)
    assert problems and not any("orchB" in p for p in problems)
    assert await plugins.poll_runs("orchA", PollContext("i", "orchA", {}, (), None)) == []


async def test_valid_install_has_no_problems():
    fields = {"credentials": {"projectId": "p", "apiKey": "k", "region": "us-east-1"}, "variables": {}}
    assert await make_plugins().validate_install("orchB", fields, DEFINITION) == []


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, ["orchB credentials are required: projectId, apiKey, region"]),
        (
            {"credentials": {"projectId": "p", "apiKey": "", "region": "eu"}},
            ["orchB credentials.apiKey is required (a non-empty string)"],
        ),
        (
            {"credentials": {"apiKey": "k", "region": 7}},
            [
                "orchB credentials.projectId is required (a non-empty string)",
                "orchB credentials.region is required (a non-empty string)",
            ],
        ),
        (
            {"credentials": {"projectId": "p", "apiKey": "k", "region": "evil.com/x"}},
            ["orchB credentials.region must be 1 to 32 lowercase letters, digits or hyphens"],
        ),
        (
            {"credentials": {"projectId": "p", "apiKey": "k", "region": "a" * 33}},
            ["orchB credentials.region must be 1 to 32 lowercase letters, digits or hyphens"],
        ),
        (
            {"credentials": {"projectId": "p", "apiKey": "k", "region": "eu"}, "model": "nope:x"},
            ["model 'nope:x' is not a known model"],
        ),
    ],
)
async def test_validation_problems(fields, expected):
    assert await make_plugins().validate_install("orchB", fields, DEFINITION) == expected


async def test_validation_reports_an_agent_with_an_unknown_model():
    definition = {"agents": [{"key": "x", "name": "X", "model": "other:big", "prompt": "p"}]}
    fields = {"credentials": {"projectId": "p", "apiKey": "k", "region": "eu"}}
    assert await make_plugins().validate_install("orchB", fields, definition) == [
        "agent 'x' has an unknown model 'other:big'"
    ]
    assert (
        await make_plugins().validate_install("orchB", {**fields, "model": "providerB:standard"}, definition)
        == []
    )


# ---- provisioning -----------------------------------------------------------------------


async def test_provision_creates_one_upstream_agent_per_team_agent(fake):
    result = await make_plugins().provision("orchB", provision_context(fake))

    upserts = [r for r in fake.requests if r.path == "/latest/agents/upsert"]
    assert len(upserts) == 3 and len(fake.agents) == 3
    assert all(r.authorization == f"{fake.project_id}:{fake.api_key}" for r in upserts)
    assert [r.body for r in upserts] == [
        {
            "name": a["name"],
            "system_prompt": a["prompt"],
            "model": model,
            "metadata": {"svcInstallId": "inst-1", "svcAgentKey": a["key"], "svcIngestUrl": INGEST_URL},
        }
        for a, model in zip(
            DEFINITION["agents"],
            [UPSTREAM["providerB:standard"], UPSTREAM["providerA:small"], UPSTREAM["providerC:flash"]],
            strict=True,
        )
    ]
    assert "svc_install_tok" not in json.dumps([r.body for r in fake.requests])

    ids = [a.externalId for a in result.deployed_agents]
    assert set(ids) == set(fake.agents)
    assert [(a.key, a.name) for a in result.deployed_agents] == [
        ("lead", "Lead"),
        ("writer", "Writer"),
        ("editor", "Editor"),
    ]
    assert result.state == {"agentIds": ids}
    dashboard = f"https://app.relevanceai.com/agents/f1db6c/{fake.project_id}"
    assert result.platform_data == {
        "dashboardUrl": dashboard,
        "agentUrls": [{"name": a.name, "url": f"{dashboard}/{a.externalId}"} for a in result.deployed_agents],
    }


async def test_install_model_overrides_every_agent_model(fake):
    await make_plugins().provision("orchB", provision_context(fake, model="providerB:reasoning-small"))
    assert {a["model"] for a in fake.agents.values()} == {UPSTREAM["providerB:reasoning-small"]}


async def test_a_mid_way_failure_rolls_back_and_hides_the_api_key(fake, caplog):
    fake.fail_upsert_at = 2
    caplog.set_level(logging.DEBUG)

    with pytest.raises(PlatformError) as raised:
        await make_plugins().provision("orchB", provision_context(fake))

    error = raised.value
    assert fake.agents == {}, "the agent created before the failure was deleted"
    (first,) = fake.created
    assert fake.paths() == ["/agents/upsert", "/agents/upsert", f"/agents/{first}/delete"]
    assert error.upstream_status == 500
    assert error.detail.startswith("orchB agents/upsert failed with HTTP 500: ")
    assert "internal error while saving the agent" in error.detail
    assert len(error.detail) < 300
    assert not error.denied
    for text in (error.detail, str(error), caplog.text):
        assert fake.api_key not in text
        assert fake.authorization not in text


async def test_a_connection_failure_raises_a_platform_error(unused_tcp_port, monkeypatch):
    monkeypatch.setenv("SVC_ORCHB_BASE_URL", f"http://127.0.0.1:{unused_tcp_port}/latest")
    fake = FakeOrchB()
    with pytest.raises(PlatformError) as raised:
        await make_plugins().provision("orchB", provision_context(fake))
    assert raised.value.upstream_status is None
    assert raised.value.detail == "orchB agents/upsert failed: ConnectError"


async def test_wrong_credentials_are_a_denied_platform_error(fake):
    context = replace(provision_context(fake), credentials=credentials(fake, apiKey="wrong-key"))
    with pytest.raises(PlatformError) as raised:
        await make_plugins().provision("orchB", context)
    assert raised.value.upstream_status == 401 and raised.value.denied
    assert "wrong-key" not in raised.value.detail
    assert fake.agents == {}


async def test_the_egress_guard_refuses_loopback_without_allow_private(fake):
    # A refusal is a PlatformError (the API's 502), never EgressDenied escaping as a 500.
    with pytest.raises(PlatformError, match="the configured base URL is not allowed"):
        await make_plugins().provision("orchB", provision_context(fake, allow_private=False))
    assert fake.requests == []


# ---- deprovisioning ---------------------------------------------------------------------


async def test_deprovision_deletes_every_agent(fake):
    plugins = make_plugins()
    result = await plugins.provision("orchB", provision_context(fake))

    outcome = await plugins.deprovision("orchB", deprovision_context(fake, result))

    assert outcome.deleted_agents == 3 and outcome.warnings == ()
    assert fake.agents == {}
    assert sorted(fake.paths("POST")[3:]) == sorted(
        f"/agents/{a.externalId}/delete" for a in result.deployed_agents
    )


async def test_deprovision_reports_a_missing_agent_as_a_warning(fake):
    plugins = make_plugins()
    result = await plugins.provision("orchB", provision_context(fake))
    gone = result.deployed_agents[1].externalId
    del fake.agents[gone]

    outcome = await plugins.deprovision("orchB", deprovision_context(fake, result))

    assert outcome.deleted_agents == 2
    assert len(outcome.warnings) == 1
    assert gone in outcome.warnings[0] and "HTTP 404" in outcome.warnings[0]
    assert fake.api_key not in outcome.warnings[0]
    assert fake.agents == {}


async def test_deprovision_denied_on_every_agent_raises(fake):
    plugins = make_plugins()
    result = await plugins.provision("orchB", provision_context(fake))
    fake.deny_deletes = True

    with pytest.raises(PlatformError) as raised:
        await plugins.deprovision("orchB", deprovision_context(fake, result))

    assert raised.value.denied and raised.value.upstream_status == 403
    assert fake.api_key not in raised.value.detail
    assert len(fake.agents) == 3


# ---- polling ------------------------------------------------------------------------------


async def test_poll_returns_finished_conversations_after_since(fake):
    plugins = make_plugins()
    result = await plugins.provision("orchB", provision_context(fake))
    lead, writer, _ = (a.externalId for a in result.deployed_agents)
    now = datetime.now(UTC)
    fake.add_conversation(lead, "completed", now - timedelta(minutes=10), "old")
    fake.add_conversation(lead, "unrecoverable", now - timedelta(minutes=2), "broken")
    fake.add_conversation(lead, "running", now - timedelta(minutes=1), "busy")
    fake.add_conversation(writer, "completed", now - timedelta(seconds=30), "done")
    fake.add_conversation("someone-else", "completed", now - timedelta(seconds=10), "foreign")
    since = (now - timedelta(minutes=5)).isoformat()

    reports = await plugins.poll_runs("orchB", poll_context(fake, result, since))

    assert [(r.runId, r.platformAgentId, r.status) for r in reports] == [
        ("done", writer, "completed"),
        ("broken", lead, "failed"),
    ]
    assert all(r.inputTokens is None and r.outputTokens is None for r in reports)
    listing = [r for r in fake.requests if r.method == "GET"]
    assert len(listing) == 1
    assert listing[0].authorization == fake.authorization
    assert json.loads(listing[0].query["filters"]) == [
        {
            "field": "conversation.agent_id",
            "filter_type": "exact_match",
            "condition": "==",
            "condition_value": [a.externalId for a in result.deployed_agents],
        },
    ]
    assert json.loads(listing[0].query["sort"]) == [{"update_date": "desc"}]
    assert listing[0].query["page_size"] == "100" and listing[0].query["page"] == "1"


async def test_poll_without_since_returns_every_finished_conversation(fake):
    plugins = make_plugins()
    result = await plugins.provision("orchB", provision_context(fake))
    lead = result.deployed_agents[0].externalId
    now = datetime.now(UTC)
    fake.add_conversation(lead, "completed", now - timedelta(days=3), "a")
    fake.add_conversation(lead, "timed-out", now - timedelta(days=2), "b")

    reports = await plugins.poll_runs("orchB", poll_context(fake, result, None))

    assert reports == [
        RunReport(
            platformAgentId=lead, runId="b", status="failed", errorMessage="conversation state timed-out"
        ),
        RunReport(platformAgentId=lead, runId="a", status="completed"),
    ]


async def test_poll_pages_until_it_reaches_since(fake):
    plugins = make_plugins()
    result = await plugins.provision("orchB", provision_context(fake))
    lead = result.deployed_agents[0].externalId
    now = datetime.now(UTC)
    for i in range(250):
        fake.add_conversation(lead, "completed", now - timedelta(seconds=i + 1), f"c{i:03d}")
    since = (now - timedelta(seconds=150.5)).isoformat()

    reports = await plugins.poll_runs("orchB", poll_context(fake, result, since))

    assert [r.runId for r in reports] == [f"c{i:03d}" for i in range(150)]
    assert [r.query["page"] for r in fake.requests if r.method == "GET"] == ["1", "2"], "page 3 is not read"


async def test_poll_failure_is_a_platform_error(fake):
    plugins = make_plugins()
    result = await plugins.provision("orchB", provision_context(fake))
    context = replace(poll_context(fake, result, None), credentials=credentials(fake, apiKey="stale"))
    with pytest.raises(PlatformError) as raised:
        await plugins.poll_runs("orchB", context)
    assert raised.value.upstream_status == 401 and raised.value.denied
    assert "stale" not in raised.value.detail
