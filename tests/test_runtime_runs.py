"""The managed runtime over real HTTP: delegation, limits, the http_request tool and its policy."""

from __future__ import annotations

import json

from tests.fakes.llm import DEFAULT_KEY
from tests.support.runtime import (
    managed_client,
    member,
    start_target,
    svc_install,
)


async def run(client, key, install_id, task="Do the thing"):
    response = await client.post(f"/api/installs/{install_id}/run", json={"task": task}, headers=key)
    assert response.status == 200, await response.text()
    return await response.json()


def http_call(url, method="GET", **extra):
    return {"name": "http_request", "arguments": {"method": method, "url": url, **extra}}


async def test_supervisor_delegates_and_tokens_are_summed(make_client, aiohttp_server, store):
    client, llm = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await svc_install(client, [member("lead"), member("helper", reportsTo="lead")])
    llm.script(
        tool_calls=[{"name": "delegate_helper", "arguments": {"task": "research it"}}],
        input_tokens=100,
        output_tokens=10,
    )
    llm.script(text="helper findings", input_tokens=50, output_tokens=20)
    llm.script(text="final answer", input_tokens=120, output_tokens=30)
    result = await run(client, key, install_id)
    assert result["status"] == "completed" and result["response"] == "final answer"
    assert result["agent"] == "lead"
    assert (result["inputTokens"], result["outputTokens"]) == (270, 60)
    # The helper ran its own loop with its own prompt and only the http_request tool.
    helper_call = llm.requests[1].body
    assert helper_call["system"] == "You are helper."
    assert [t["name"] for t in helper_call["tools"]] == ["http_request"]
    lead_tools = [t["name"] for t in llm.requests[0].body["tools"]]
    assert lead_tools == ["delegate_helper", "http_request"]
    steps = await store["agent_runs"].find({"runId": result["runId"]}).to_list(None)
    assert sorted((s["agentKey"], s["status"]) for s in steps) == [
        ("helper", "completed"),
        ("lead", "completed"),
    ]
    record = await store["runs"].find_one({"runId": result["runId"]})
    assert record["status"] == "completed" and record["inputTokens"] == 270
    assert (await store["pipeline_runs"].find_one({"_id": result["runId"]}))["status"] == "completed"


async def test_variables_are_baked_into_prompts(make_client, aiohttp_server):
    client, llm = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await svc_install(
        client, [member("lead", prompt="Work for {{company}}.")], requiredVariables=["company"]
    )
    await client.patch(f"/api/installs/{install_id}/variables", json={"company": "Acme"}, headers=key)
    await run(client, key, install_id)
    assert llm.requests[0].body["system"] == "Work for Acme."


async def test_an_agent_looping_past_ten_iterations_fails_the_run(make_client, aiohttp_server, store):
    client, llm = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await svc_install(client, [member("lead")])
    for _ in range(11):
        llm.script(tool_calls=[{"name": "no_such_tool", "arguments": {}}])
    result = await run(client, key, install_id)
    assert result["status"] == "failed"
    assert "10 iterations" in result["errorMessage"]
    assert len(llm.requests) == 10


async def test_a_provider_failure_fails_the_run_without_the_key(make_client, aiohttp_server):
    client, llm = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await svc_install(client, [member("lead")])
    llm.fail_next(10, status=503)
    result = await run(client, key, install_id)
    assert result["status"] == "failed" and "503" in result["errorMessage"]
    assert DEFAULT_KEY not in json.dumps(result)


async def test_run_needs_a_task_and_an_owned_svc_install(make_client, aiohttp_server):
    client, _ = await managed_client(make_client, aiohttp_server)
    _, key, install_id = await svc_install(client, [member("lead")])
    response = await client.post(f"/api/installs/{install_id}/run", json={}, headers=key)
    assert response.status == 400 and "task" in (await response.json())["error"]
    response = await client.post("/api/installs/nope/run", json={"task": "x"}, headers=key)
    assert response.status == 404
    _, other_key, _ = await svc_install(client, [member("lead")])
    response = await client.post(f"/api/installs/{install_id}/run", json={"task": "x"}, headers=other_key)
    assert response.status == 404


async def test_every_policy_decision_is_enforced_and_logged(make_client, aiohttp_server):
    client, llm = await managed_client(make_client, aiohttp_server)
    target = await start_target(aiohttp_server)
    policy = {
        "accessPolicyVersion": "1",
        "defaultAction": "deny",
        "rules": [
            {"match": {"host": "127.0.0.1", "pathPrefix": "/ok"}, "action": "allow"},
            {"match": {"pathPrefix": "/no"}, "action": "deny", "reason": "not for agents"},
            {"match": {"pathPrefix": "/ask"}, "action": "require_approval", "reason": "sensitive"},
        ],
    }
    _, key, install_id = await svc_install(client, [member("lead", role="support", accessPolicy=policy)])
    llm.script(
        tool_calls=[
            http_call(f"{target.base}/ok"),
            http_call(f"{target.base}/no"),
            http_call(f"{target.base}/ask"),
            http_call(f"{target.base}/other"),
        ]
    )
    llm.script(text='{"decision": "allow", "reasoning": "fits a support role", "confidence": 0.8}')
    llm.script(text="done")
    assert (await run(client, key, install_id))["status"] == "completed"
    assert [r["path"] for r in target.received] == ["/ok", "/ask"]
    judge_call = llm.requests[1].body
    assert "security judge" in judge_call["system"] and "support" in judge_call["messages"][0]["content"]
    log = await (await client.get(f"/api/installs/{install_id}/security/requests", headers=key)).json()
    by_path = {entry["path"]: entry for entry in log["requests"]}
    assert (by_path["/ok"]["decision"], by_path["/ok"]["decisionSource"], by_path["/ok"]["statusCode"]) == (
        "ALLOW",
        "rule",
        200,
    )
    assert (by_path["/no"]["decision"], by_path["/no"]["reason"], by_path["/no"]["statusCode"]) == (
        "BLOCK",
        "not for agents",
        None,
    )
    assert by_path["/ask"]["decision"] == "JUDGE" and by_path["/ask"]["decisionSource"] == "judge"
    assert by_path["/ask"]["judgeReasoning"] == "fits a support role"
    assert by_path["/ask"]["judgeConfidence"] == 0.8 and by_path["/ask"]["statusCode"] == 200
    assert (by_path["/other"]["decision"], by_path["/other"]["decisionSource"]) == ("BLOCK", "default")
    entry = by_path["/ok"]
    assert {
        "id",
        "agentKey",
        "agentName",
        "runId",
        "method",
        "url",
        "hostname",
        "latencyMs",
        "createdAt",
    } <= set(entry)


async def test_the_judge_fails_closed(make_client, aiohttp_server):
    client, llm = await managed_client(make_client, aiohttp_server)
    target = await start_target(aiohttp_server)
    policy = {"accessPolicyVersion": "1", "rules": [{"action": "require_approval"}]}
    _, key, install_id = await svc_install(client, [member("lead", accessPolicy=policy)])
    llm.script(tool_calls=[http_call(f"{target.base}/x")])
    llm.script(text="I think it is probably fine")  # not the JSON the judge must give
    llm.script(text="done")
    await run(client, key, install_id)
    assert target.received == []
    log = await (await client.get(f"/api/installs/{install_id}/security/requests", headers=key)).json()
    assert [(e["decision"], e["statusCode"]) for e in log["requests"]] == [("JUDGE", None)]


async def test_an_unreachable_judge_blocks(make_client, aiohttp_server):
    # The judge's provider is not configured at all: the request is blocked, the run goes on.
    client, llm = await managed_client(make_client, aiohttp_server, judge_model="providerB:mini")
    target = await start_target(aiohttp_server)
    policy = {"accessPolicyVersion": "1", "rules": [{"action": "require_approval"}]}
    _, key, install_id = await svc_install(client, [member("lead", accessPolicy=policy)])
    llm.script(tool_calls=[http_call(f"{target.base}/x")])
    llm.script(text="done")
    assert (await run(client, key, install_id))["status"] == "completed"
    assert target.received == []
    log = await (await client.get(f"/api/installs/{install_id}/security/requests", headers=key)).json()
    assert log["requests"][0]["judgeReasoning"].startswith("Judge unavailable")
    tool_result = llm.requests[1].body["messages"][-1]["content"][0]["content"]
    assert tool_result.startswith("Blocked by the security judge") and "not configured" in tool_result


async def test_no_policy_is_passthrough_and_secrets_stay_out_of_the_log(make_client, aiohttp_server):
    client, llm = await managed_client(make_client, aiohttp_server)
    target = await start_target(aiohttp_server)
    _, key, install_id = await svc_install(client, [member("lead")], requiredSecrets=["API_TOKEN"])
    await client.patch(f"/api/installs/{install_id}/secrets", json={"API_TOKEN": "tok-777"}, headers=key)
    written = f"{target.base}/data?key=${{API_TOKEN}}"
    llm.script(
        tool_calls=[
            http_call(
                written,
                headers={"Authorization": "Bearer ${API_TOKEN}"},
                method="POST",
                body="plain ${API_TOKEN} body",
            )
        ]
    )
    llm.script(text="done")
    await run(client, key, install_id)
    sent = target.received[0]
    assert sent["query"] == {"key": "tok-777"} and sent["headers"]["Authorization"] == "Bearer tok-777"
    assert sent["body"] == "plain ${API_TOKEN} body", "bodies are not substituted"
    log = await (await client.get(f"/api/installs/{install_id}/security/requests", headers=key)).json()
    assert log["requests"][0]["decision"] == "PASSTHROUGH" and log["requests"][0]["url"] == written
    assert "tok-777" not in json.dumps(log)
    tool_result = llm.requests[1].body["messages"][-1]["content"][0]["content"]
    assert json.loads(tool_result)["status"] == 200


async def test_internal_addresses_are_refused_unless_allowed(make_client, aiohttp_server):
    client, llm = await managed_client(make_client, aiohttp_server, egress_allow_private=False)
    target = await start_target(aiohttp_server)
    _, key, install_id = await svc_install(client, [member("lead")])
    llm.script(tool_calls=[http_call(f"{target.base}/secret"), http_call("http://169.254.169.254/latest")])
    llm.script(text="done")
    await run(client, key, install_id)
    assert target.received == []
    log = await (await client.get(f"/api/installs/{install_id}/security/requests", headers=key)).json()
    # Both refusals are logged (an empty log must not pass), each naming the guard.
    assert [e["decision"] for e in log["requests"]] == ["BLOCK", "BLOCK"]
    assert all("Egress" in e["reason"] for e in log["requests"])


async def test_internal_addresses_pass_when_allowed(make_client, aiohttp_server):
    """The "unless allowed" half: with egress_allow_private the same call reaches the target."""
    client, llm = await managed_client(make_client, aiohttp_server, egress_allow_private=True)
    target = await start_target(aiohttp_server)
    _, key, install_id = await svc_install(client, [member("lead")])
    llm.script(tool_calls=[http_call(f"{target.base}/secret")])
    llm.script(text="done")
    await run(client, key, install_id)
    assert len(target.received) == 1
    log = await (await client.get(f"/api/installs/{install_id}/security/requests", headers=key)).json()
    assert [e["decision"] for e in log["requests"]] == ["PASSTHROUGH"]


async def test_policies_read_back(make_client, aiohttp_server):
    client, _ = await managed_client(make_client, aiohttp_server)
    policy = {
        "accessPolicyVersion": "1",
        "defaultAction": "deny",
        "rules": [{"match": {"host": "*.example.com"}, "action": "require_approval"}],
    }
    _, key, install_id = await svc_install(client, [member("lead", accessPolicy=policy), member("open")])
    body = await (await client.get(f"/api/installs/{install_id}/policies", headers=key)).json()
    by_key = {a["key"]: a for a in body["agents"]}
    assert by_key["open"]["policy"] is None
    assert by_key["lead"]["policy"]["defaultAction"] == "BLOCK"
    assert by_key["lead"]["policy"]["rules"][0]["hosts"] == ["*.example.com"]
    assert by_key["lead"]["policy"]["rules"][0]["action"] == "JUDGE"
    _, other, _ = await svc_install(client, [member("x")])
    assert (await client.get(f"/api/installs/{install_id}/policies", headers=other)).status == 404


async def test_runtime_webhook_test_endpoint(make_client, aiohttp_server):
    client, llm = await managed_client(make_client, aiohttp_server)
    llm.script(text="hello from the test agent")
    response = await client.post(
        "/api/runtime/webhook/test", json={"systemPrompt": "Be brief.", "task": "Hi"}
    )
    assert response.status == 200 and await response.json() == {"response": "hello from the test agent"}
    assert llm.requests[0].body["system"] == "Be brief."
    assert (await client.post("/api/runtime/webhook/test", json={"task": "x"})).status == 400


async def test_malformed_tool_calls_never_crash_a_run_nor_leak_secrets(
    make_client, aiohttp_server, store, caplog
):
    client, llm = await managed_client(make_client, aiohttp_server, egress_allow_private=False)
    _, key, install_id = await svc_install(client, [member("lead")], requiredSecrets=["TOK"])
    await client.patch(f"/api/installs/{install_id}/secrets", json={"TOK": "s3cr3t-value"}, headers=key)
    llm.script(
        tool_calls=[
            http_call("http://example.com:${TOK}/"),  # the secret makes an invalid port
            http_call("http://${TOK}.invalid/"),  # the secret becomes part of the host
            http_call("http://example.com/", headers="not an object"),
            http_call("http://example.com/", method="FETCH"),
        ]
    )
    llm.script(text="done")
    result = await run(client, key, install_id)
    assert result["status"] == "completed"
    log = await (await client.get(f"/api/installs/{install_id}/security/requests", headers=key)).json()
    assert len(log["requests"]) == 2
    everything = json.dumps(log) + json.dumps(llm.bodies) + caplog.text
    assert "s3cr3t-value" not in everything, "no secret in the log, the model's context or the service log"


async def test_a_callback_url_that_cannot_be_parsed_is_400(make_client, aiohttp_server):
    client, _ = await managed_client(make_client, aiohttp_server)
    caller, _, _ = await svc_install(client, [member("lead")])
    mine = await (await client.get("/api/installs/mine", headers=caller.cookie)).json()
    token = mine[0]["webhookToken"]
    for bad in ("https://h:abc/", "ftp://example.com/", "https://"):
        response = await client.post(f"/api/webhook/{token}", json={"callbackUrl": bad})
        assert response.status == 400, bad
