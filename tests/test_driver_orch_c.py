"""The orchC driver (Amazon Bedrock Agents through boto3) against a local fake over real HTTP."""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest

from config.catalogue import BEDROCK
from plugins.builtin import orch_c, orch_c_bedrock
from plugins.manager import Plugins
from plugins.types import (
    DeprovisionContext,
    InvokeContext,
    PlatformError,
    ProvisionContext,
    ProvisionResult,
)
from tests.fakes.orch_c import FakeBedrockAgents, create_app

FLATTENED = "Hierarchy flattened: orchC supports one level, so every agent reports to the supervisor boss"


def agent(key: str, reports_to: str | None = None, **extra: Any) -> dict[str, Any]:
    """A team agent as the definition holds it."""
    return {
        "key": key,
        "name": key.title(),
        "title": f"{key.title()} lead",
        "role": "support",
        "capabilities": f"everything about {key}",
        "model": "providerA:middle",
        "prompt": f"You are {key}. Do the {key} work carefully and report back in short sentences.",
        "reportsTo": reports_to,
    } | extra


def team() -> list[dict[str, Any]]:
    """A supervisor and three collaborators; one prompt is shorter than Bedrock's minimum."""
    return [
        agent("boss", role="manager", model="providerB:standard"),
        agent("research", "boss"),
        agent("writer", "boss", prompt="Write."),
        agent("editor", "boss", model="providerA:small"),
    ]


@pytest.fixture
def fake() -> FakeBedrockAgents:
    """The fake account's state."""
    return FakeBedrockAgents()


@pytest.fixture
async def endpoint(aiohttp_server: Any, fake: FakeBedrockAgents, monkeypatch: pytest.MonkeyPatch) -> str:
    """The fake served on 127.0.0.1 and named in SVC_ORCHC_ENDPOINT_URL."""
    server = await aiohttp_server(create_app(fake))
    url = f"http://127.0.0.1:{server.port}"
    monkeypatch.setenv(orch_c_bedrock.ENDPOINT_ENV, url)
    return url


@pytest.fixture
def plugins() -> Plugins:
    """The plugin manager with the built-ins this test needs."""
    return Plugins(builtins=("plugins.builtin.svc_platform", "plugins.builtin.orch_c"))


def provision_context(
    fake: FakeBedrockAgents, agents: list[dict[str, Any]], *, allow_private: bool = True, **options: Any
) -> ProvisionContext:
    """A provisioning context for the fake account."""
    return ProvisionContext(
        install_id="inst_0123abcd",
        platform="orchC",
        template={"id": "tpl_1", "name": "Team", "slug": "team", "version": 1},
        definition={"version": "v1", "agents": agents},
        credentials=fake.credentials(),
        secrets={},
        options=options,
        install_token="svc_install_token",
        runtime_webhook_url="http://127.0.0.1:1/api/runtime/webhook",
        webhook_secret="whsec",
        ingest_url="http://127.0.0.1:1/api/runs/ingest",
        allow_private=allow_private,
    )


def deprovision_context(fake: FakeBedrockAgents, result: ProvisionResult) -> DeprovisionContext:
    """A deprovisioning context for what a provisioning returned."""
    return DeprovisionContext(
        install_id="inst_0123abcd",
        platform="orchC",
        credentials=fake.credentials(),
        deployed_agents=result.deployed_agents,
        state=result.state,
        options={},
        allow_private=True,
    )


def invoke_context(
    fake: FakeBedrockAgents, state: dict[str, Any], text: str, session_id: str | None = None
) -> InvokeContext:
    """An invocation context for the fake account."""
    return InvokeContext("inst_0123abcd", "orchC", fake.credentials(), state, text, session_id, True)


def valid_fields(fake: FakeBedrockAgents, **extra: Any) -> dict[str, Any]:
    """Install fields that pass validation."""
    return {"credentials": fake.credentials()} | extra


# ---- platform and validation -----------------------------------------------------------


def test_platform_info(plugins: Plugins) -> None:
    info = plugins.platform("orchC")
    assert info is not None
    assert info.label == "Amazon Bedrock Agents"
    assert [(f.key, f.type, f.required) for f in info.credential_fields] == [
        ("accessKeyId", "text", True),
        ("secretAccessKey", "password", True),
        ("region", "text", True),
        ("agentResourceRoleArn", "text", True),
    ]
    assert info.capabilities.maxHierarchyDepth == 1
    assert info.capabilities.supportedModels == ("providerA", "providerB")
    assert info.capabilities.billingCompleteness == "full"
    assert info.capabilities.provisioningModel == "rest"
    assert info.accepts == frozenset({"credentials", "variables", "model"})
    assert info.listed


async def test_other_platforms_never_reach_this_driver(fake: FakeBedrockAgents) -> None:
    """The manager calls a platform hook on the plugin that declared the platform only: orchC,
    registered last (so asked first by pluggy), is not asked about orchB, and the driver needs
    no guard of its own."""
    plugins = Plugins(builtins=("plugins.builtin.orch_b", "plugins.builtin.orch_c"))
    problems = await plugins.validate_install("orchB", {}, {"agents": team()})
    assert problems and all("orchB" in p for p in problems)
    assert not any("orchC" in p for p in problems)
    assert fake.requests == []


async def test_a_valid_install_has_no_problems(plugins: Plugins, fake: FakeBedrockAgents) -> None:
    assert await plugins.validate_install("orchC", valid_fields(fake), {"agents": team()}) == []


async def test_models_outside_the_families_are_named(plugins: Plugins, fake: FakeBedrockAgents) -> None:
    agents = [*team(), agent("seo", "boss", model="providerC:flash")]
    problems = await plugins.validate_install("orchC", valid_fields(fake), {"agents": agents})
    assert len(problems) == 1
    assert "'seo'" in problems[0] and "providerC:flash" in problems[0]

    fields = valid_fields(fake, model="providerC:pro")
    problems = await plugins.validate_install("orchC", fields, {"agents": team()})
    assert len(problems) == 4 and all("providerC:pro" in p for p in problems)
    assert (
        await plugins.validate_install(
            "orchC", valid_fields(fake, model="providerB:code-small"), {"agents": agents}
        )
        == []
    )


async def test_at_most_ten_collaborators(plugins: Plugins, fake: FakeBedrockAgents) -> None:
    ten = [agent("boss")] + [agent(f"helper{i}", "boss") for i in range(10)]
    assert await plugins.validate_install("orchC", valid_fields(fake), {"agents": ten}) == []
    eleven = [*ten, agent("helper10", "boss")]
    problems = await plugins.validate_install("orchC", valid_fields(fake), {"agents": eleven})
    assert problems == ["orchC supports at most 10 collaborator agents"]


@pytest.mark.parametrize("region", ["US-EAST-1", "useast1", "us-east", "eu-west-12", "us-east-1;x"])
async def test_bad_region(plugins: Plugins, fake: FakeBedrockAgents, region: str) -> None:
    fields = valid_fields(fake)
    fields["credentials"]["region"] = region
    problems = await plugins.validate_install("orchC", fields, {"agents": team()})
    assert len(problems) == 1 and "region" in problems[0]


async def test_missing_credentials_and_bad_role(plugins: Plugins, fake: FakeBedrockAgents) -> None:
    credentials = {"accessKeyId": "AKIA", "secretAccessKey": " ", "agentResourceRoleArn": "role/x"}
    fields = {"credentials": credentials}
    problems = await plugins.validate_install("orchC", fields, {"agents": team()})
    assert "credentials.secretAccessKey is required for orchC" in problems
    assert "credentials.region is required for orchC" in problems
    assert any("agentResourceRoleArn must be an IAM role ARN" in p for p in problems)
    assert len(problems) == 3
    assert len(await plugins.validate_install("orchC", {}, {"agents": team()})) == 4


# ---- provisioning ----------------------------------------------------------------------


async def test_provision_order_and_shapes(plugins: Plugins, fake: FakeBedrockAgents, endpoint: str) -> None:
    result = await plugins.provision("orchC", provision_context(fake, team()))

    names = ["research", "writer", "editor"]
    ops = [r.operation for r in fake.writes()]
    assert ops == ["CreateAgent", "PrepareAgent", "CreateAgentAlias"] * 3 + [
        "CreateAgent",
        "AssociateAgentCollaborator",
        "AssociateAgentCollaborator",
        "AssociateAgentCollaborator",
        "PrepareAgent",
        "CreateAgentAlias",
    ]
    creates = [r.body for r in fake.writes() if r.operation == "CreateAgent"]
    assert [c["agentName"] for c in creates] == [f"svc-inst-0123abcd-{k}" for k in [*names, "boss"]]
    assert [c["foundationModel"] for c in creates] == [
        BEDROCK["providerA:middle"],
        BEDROCK["providerA:middle"],
        BEDROCK["providerA:small"],
        BEDROCK["providerB:standard"],
    ]
    assert {c["agentResourceRoleArn"] for c in creates} == {fake.role_arn}
    assert [c["agentCollaboration"] for c in creates] == ["DISABLED"] * 3 + ["SUPERVISOR"]
    assert all(40 <= len(c["instruction"]) <= 4000 for c in creates)
    assert creates[1]["instruction"].startswith("Write. ")
    assert creates[0]["instruction"] == team()[1]["prompt"]

    by_key = {a.key: a for a in result.deployed_agents}
    assert [a.key for a in result.deployed_agents] == ["boss", *names]
    assert {a.externalId for a in result.deployed_agents} == set(fake.agents)
    assert by_key["boss"].name == "Boss"
    boss_id = by_key["boss"].externalId

    associations = fake.collaborators[boss_id]
    assert [c["collaboratorName"] for c in associations] == names
    for link, key in zip(associations, names, strict=True):
        agent_id = by_key[key].externalId
        alias = next(iter(fake.aliases[agent_id].values()))
        assert link["agentDescriptor"]["aliasArn"] == alias["agentAliasArn"]
        assert f"{key.title()} lead" in link["collaborationInstruction"]
        assert f"everything about {key}" in link["collaborationInstruction"]
    assert all(a["agentStatus"] == "PREPARED" for a in fake.agents.values())
    assert fake.alias_count() == 4

    assert result.warnings == ()
    assert result.state["supervisor"]["agentId"] == boss_id
    assert result.state["supervisor"]["aliasId"] in fake.aliases[boss_id]
    assert [(a["key"], a["agentId"]) for a in result.state["agents"]] == [
        (k, by_key[k].externalId) for k in names
    ]
    assert all(a["aliasId"] in fake.aliases[a["agentId"]] for a in result.state["agents"])
    dashboard = result.platform_data["dashboardUrl"]
    assert dashboard.startswith("https://eu-west-1.console.aws.amazon.com/bedrock/") and boss_id in dashboard
    assert [u["name"] for u in result.platform_data["agentUrls"]] == ["Boss", "Research", "Writer", "Editor"]
    assert fake.secret_access_key not in repr(result)


async def test_deeper_reporting_lines_are_flattened(
    plugins: Plugins, fake: FakeBedrockAgents, endpoint: str
) -> None:
    agents = [agent("boss"), agent("lead", "boss"), agent("junior", "lead")]
    result = await plugins.provision("orchC", provision_context(fake, agents))
    assert result.warnings == (FLATTENED,)
    boss_id = result.state["supervisor"]["agentId"]
    assert [c["collaboratorName"] for c in fake.collaborators[boss_id]] == ["lead", "junior"]
    assert list(fake.collaborators) == [boss_id]


async def test_model_override_and_a_single_agent(
    plugins: Plugins, fake: FakeBedrockAgents, endpoint: str
) -> None:
    context = provision_context(fake, [agent("solo")], model="providerB:code-small")
    result = await plugins.provision("orchC", context)
    (created,) = fake.agents.values()
    assert created["foundationModel"] == BEDROCK["providerB:code-small"]
    assert created["agentCollaboration"] == "DISABLED"
    assert result.state["agents"] == [] and result.state["supervisor"]["key"] == "solo"


@pytest.mark.parametrize("failing", [3, 4])
async def test_failure_rolls_back_everything(
    plugins: Plugins, fake: FakeBedrockAgents, endpoint: str, failing: int
) -> None:
    fake.fail_create_agent_at = failing  # the third collaborator, or the supervisor
    with pytest.raises(PlatformError) as caught:
        await plugins.provision("orchC", provision_context(fake, team()))
    assert caught.value.detail == "orchC CreateAgent failed: InternalServerException"
    assert caught.value.upstream_status == 500
    assert not caught.value.denied
    assert fake.agents == {} and fake.alias_count() == 0
    attempts = orch_c_bedrock.MAX_ATTEMPTS
    assert len([r for r in fake.requests if r.operation == "CreateAgent"]) == failing - 1 + attempts
    deleted_aliases = [r for r in fake.requests if r.operation == "DeleteAgentAlias"]
    deleted_agents = [r for r in fake.requests if r.operation == "DeleteAgent"]
    assert len(deleted_aliases) == len(deleted_agents) == failing - 1
    assert all(r.query == {"skipResourceInUseCheck": "true"} for r in deleted_agents)
    assert fake.secret_access_key not in str(caught.value)


async def test_a_loopback_endpoint_is_refused_unless_private_is_allowed(
    plugins: Plugins, fake: FakeBedrockAgents, endpoint: str
) -> None:
    with pytest.raises(PlatformError) as caught:
        await plugins.provision("orchC", provision_context(fake, team(), allow_private=False))
    assert "loopback" in caught.value.detail
    assert fake.requests == []


async def test_no_profile_or_aws_config_is_read(
    plugins: Plugins, fake: FakeBedrockAgents, endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    config = tmp_path / "config"
    config.write_text("[default]\nregion = us-west-2\n")
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGWRONGWRONG1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    result = await plugins.provision("orchC", provision_context(fake, [agent("solo")]))
    assert len(result.deployed_agents) == 1


# ---- deprovisioning --------------------------------------------------------------------


async def test_deprovision_deletes_every_alias_and_agent(
    plugins: Plugins, fake: FakeBedrockAgents, endpoint: str
) -> None:
    result = await plugins.provision("orchC", provision_context(fake, team()))
    fake.requests.clear()

    outcome = await plugins.deprovision("orchC", deprovision_context(fake, result))

    assert outcome.deleted_agents == 4 and outcome.warnings == ()
    assert fake.agents == {} and fake.alias_count() == 0
    ops = [(r.operation, r.path.split("/")[2]) for r in fake.requests]
    expected = []
    for entry in [result.state["supervisor"], *result.state["agents"]]:
        expected += [("DeleteAgentAlias", entry["agentId"]), ("DeleteAgent", entry["agentId"])]
    assert ops == expected
    deletes = [r for r in fake.requests if r.operation == "DeleteAgent"]
    assert all(r.query == {"skipResourceInUseCheck": "true"} for r in deletes)


async def test_deprovision_reports_partial_failures(
    plugins: Plugins, fake: FakeBedrockAgents, endpoint: str
) -> None:
    result = await plugins.provision("orchC", provision_context(fake, team()))
    writer = next(a for a in result.state["agents"] if a["key"] == "writer")
    fake.conflict_deletes.add(writer["agentId"])

    outcome = await plugins.deprovision("orchC", deprovision_context(fake, result))

    assert outcome.deleted_agents == 3
    assert outcome.warnings == (
        f"agent writer ({writer['agentId']}) was not deleted: DeleteAgentAlias failed: ConflictException",
    )
    assert list(fake.agents) == [writer["agentId"]]


async def test_access_denied_on_delete(plugins: Plugins, fake: FakeBedrockAgents, endpoint: str) -> None:
    result = await plugins.provision("orchC", provision_context(fake, team()))
    fake.deny_deletes = True

    with pytest.raises(PlatformError) as caught:
        await plugins.deprovision("orchC", deprovision_context(fake, result))

    error = caught.value
    assert error.denied and error.upstream_status == 403
    assert error.detail.startswith("orchC DeleteAgentAlias failed: AccessDeniedException: User: arn:aws:")
    assert "is not authorized to perform: bedrock:DeleteAgentAlias" in error.detail
    assert fake.secret_access_key not in error.detail and fake.secret_access_key not in str(error)
    assert len(fake.agents) == 4 and fake.alias_count() == 4


# ---- invocation ------------------------------------------------------------------------


async def test_invoke_the_supervisor(plugins: Plugins, fake: FakeBedrockAgents, endpoint: str) -> None:
    result = await plugins.provision("orchC", provision_context(fake, team()))
    supervisor = result.state["supervisor"]
    reply = await plugins.invoke("orchC", invoke_context(fake, result.state, "What is new?"))

    assert reply.text == "svc-inst-0123abcd-boss answers: What is new?"
    assert re.fullmatch(r"[0-9a-f]{32}", reply.session_id)
    assert reply.agent_name == "Boss"
    assert (reply.input_tokens, reply.output_tokens) == fake.usage
    call = fake.requests[-1]
    assert call.operation == "InvokeAgent"
    assert call.path == (
        f"/agents/{supervisor['agentId']}/agentAliases/{supervisor['aliasId']}/sessions/{reply.session_id}/text"
    )
    assert call.body == {"inputText": "What is new?", "enableTrace": True}

    again = await plugins.invoke("orchC", invoke_context(fake, result.state, "More", reply.session_id))
    assert again.session_id == reply.session_id


async def test_invoke_of_a_missing_alias_is_a_platform_error(
    plugins: Plugins, fake: FakeBedrockAgents, endpoint: str
) -> None:
    state = {"supervisor": {"key": "boss", "agentId": "AAAAAAAAAA", "aliasId": "BBBBBBBBBB"}}
    with pytest.raises(PlatformError) as caught:
        await plugins.invoke("orchC", invoke_context(fake, state, "hi"))
    assert caught.value.detail == "orchC InvokeAgent failed: ResourceNotFoundException"
    assert caught.value.upstream_status == 404


def test_stream_assembly() -> None:
    usage = {"metadata": {"usage": {"inputTokens": 10, "outputTokens": 4}}}
    events = [
        {"trace": {"trace": {"preProcessingTrace": {"modelInvocationOutput": usage}}}},
        {"chunk": {"bytes": b"Hello, "}},
        {"trace": {"agentId": "W", "trace": {"orchestrationTrace": {"modelInvocationOutput": usage}}}},
        {"chunk": {"bytes": base64.b64encode(b"world").decode()}},
        {"trace": {"trace": {"routingClassifierTrace": {"modelInvocationOutput": {"metadata": {}}}}}},
    ]
    assert orch_c.assemble_completion(events) == ("Hello, world", 20, 8)
    assert orch_c.assemble_completion([{"chunk": {"bytes": b"no usage"}}]) == ("no usage", 0, 0)
    assert orch_c.assemble_completion([]) == ("", 0, 0)
