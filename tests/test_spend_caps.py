"""Spend caps: PATCH /api/installs/:installId/limits; a run past the monthly cap is refused (409 with
the cap, the amount spent and the reset) before any model call, for every trigger; the deployer is
mailed once at 80% and once at 100%; a run crossing its token cap stops at the next step boundary,
failed, and its tokens are billed as usage."""

from __future__ import annotations

from typing import Any

from tests.support.accounts import bearer, create_key, signup
from tests.support.billing import billing, paid_install, payment_settings
from tests.support.runtime import member, provider_settings, start_llm, svc_install
from tests.support.templates import publish_template
from tests.support.waiting import wait_for, wait_settled, wait_status

# Two steps with a gate between them: runs pause there, so a continue can be refused too.
TEAM = {
    "version": "v1",
    "agents": [member("lead"), member("next")],
    "gates": [{"name": "g", "after": "lead"}],
}


async def limits(client: Any, install_id: str, headers: dict[str, str], **body: Any) -> Any:
    return await client.patch(f"/api/installs/{install_id}/limits", json=body, headers=headers)


async def test_limits_are_validated_set_cleared_and_reach_only_the_deployer(make_client, aiohttp_server):
    _llm, url = await start_llm(aiohttp_server)
    client = await make_client(rate_limit_multiplier=None, providers=provider_settings(url))
    caller, key, install_id = await svc_install(client, [member("lead")])
    for bad in (
        {"monthlyCapCents": -1},
        {"monthlyCapCents": 10**12},
        {"runTokenCap": 0},
        {"runTokenCap": 10**12},
        {"monthlyCapCents": "100"},
        {"monthlyCapCents": 1.5},
        {"runTokenCap": True},
        {},
    ):
        response = await limits(client, install_id, key, **bad)
        assert response.status == 400, (bad, await response.text())
        assert "error" in await response.json()

    response = await limits(client, install_id, key, monthlyCapCents=500, runTokenCap=2000)
    assert response.status == 200, await response.text()
    body = await response.json()
    assert (body["monthlyCapCents"], body["runTokenCap"], body["spentCents"]) == (500, 2000, 0)
    assert body["periodResetsAt"].endswith("T00:00:00.000Z") and body["periodResetsAt"][8:10] == "01"

    # Left out: unchanged; null: cleared. A session of the deployer works as a key does.
    body = await (await limits(client, install_id, caller.cookie, runTokenCap=None)).json()
    assert (body["monthlyCapCents"], body["runTokenCap"]) == (500, None)

    stranger = await signup(client)
    assert (await limits(client, install_id, stranger.cookie, monthlyCapCents=1)).status == 404
    other_key = await create_key(client, stranger)
    assert (await limits(client, install_id, bearer(other_key), monthlyCapCents=1)).status == 404
    assert (await limits(client, "no-such-install", key, monthlyCapCents=1)).status == 404


async def outbox_kinds(store: Any, to: str) -> list[str]:
    return [doc["kind"] async for doc in store["outbox"].find({"to": to}).sort("createdAt", 1)]


async def test_a_run_past_the_monthly_cap_is_refused_before_any_model_call_for_every_trigger(
    make_client, aiohttp_server, store
):
    llm, url = await start_llm(aiohttp_server)
    client = await make_client(**payment_settings(None, providers=provider_settings(url)))
    builder = await signup(client)
    builder_key = await create_key(client, builder)
    template = await publish_template(
        client, builder_key, pricingModel="per_run", priceUsdCents=25, definition=TEAM, visibility="public"
    )
    deal = await paid_install(client, None, builder=(builder, builder_key), template=template)
    key = bearer(deal.deployer_key)
    install_id = deal.install_id
    # 4 completed runs at 25 cents: 100 of a 125-cent cap spent (80%). Real managed runs (each
    # paused at the gate, then continued to its end), since only the runtime records them.
    for _ in range(4):
        llm.script(text="first step", input_tokens=1, output_tokens=1)
        ran = await client.post(f"/api/installs/{install_id}/run", json={"task": "go"}, headers=key)
        assert ran.status == 200 and (await ran.json())["pausedAtGate"] == "g", await ran.text()
        llm.script(text="second step", input_tokens=1, output_tokens=1)
        go_on = await client.post(f"/api/installs/{install_id}/continue", json={}, headers=key)
        assert go_on.status == 200, await go_on.text()
        await wait_settled(store, (await ran.json())["runId"])
    response = await limits(client, install_id, key, monthlyCapCents=125)
    assert (await response.json())["spentCents"] == 100

    # Under the cap: a run starts (the 80% mail goes, once); it pauses at the gate and is
    # continued to its end: 125 of 125 spent.
    llm.script(text="first step", input_tokens=1, output_tokens=1)
    run = await client.post(f"/api/installs/{install_id}/run", json={"task": "go"}, headers=key)
    assert run.status == 200, await run.text()
    first = (await run.json())["runId"]
    await wait_status(store, first, "paused")
    assert await outbox_kinds(store, deal.deployer.email) == ["install.spend_cap_80"]
    llm.script(text="second step", input_tokens=1, output_tokens=1)
    go_on = await client.post(f"/api/installs/{install_id}/continue", json={}, headers=key)
    assert go_on.status == 200, await go_on.text()
    await wait_status(store, first, "completed")

    async def spent_all() -> bool:  # the run's usage is counted just after its status is written
        answer = await limits(client, install_id, key, monthlyCapCents=125)
        return bool((await answer.json())["spentCents"] == 125)

    assert await wait_for(spent_all)
    assert await outbox_kinds(store, deal.deployer.email) == ["install.spend_cap_80"]

    # 125 of 125 spent: every trigger is refused, and the provider sees no call.
    calls = len(llm.requests)
    refused = await client.post(f"/api/installs/{install_id}/run", json={"task": "go"}, headers=key)
    assert refused.status == 409, await refused.text()
    body = await refused.json()
    assert body["monthlyCapCents"] == 125 and body["spentCents"] == 125
    assert body["periodResetsAt"][8:] == "01T00:00:00.000Z"
    assert body["error"].startswith("Monthly spend cap reached")

    token = next(
        i["webhookToken"]
        for i in await (await client.get("/api/installs/mine", headers=deal.deployer.cookie)).json()
        if i["id"] == install_id
    )
    hook = await client.post(f"/api/webhook/{token}", json={"inputText": "go"})
    assert hook.status == 409 and (await hook.json())["spentCents"] == 125

    schedule = {"cronExpression": "0 0 1 1 *"}
    saved = await client.patch(f"/api/installs/{install_id}/schedule", json=schedule, headers=key)
    assert saved.status == 200, await saved.text()
    fired = await client.post(f"/api/installs/{install_id}/schedule/trigger", headers=key)
    assert fired.status == 200, await fired.text()
    scheduled = await wait_status(store, (await fired.json())["runId"], "failed")
    assert scheduled["errorMessage"].startswith("Monthly spend cap reached")
    assert len(llm.requests) == calls, "no model call for a refused run"
    assert await outbox_kinds(store, deal.deployer.email) == ["install.spend_cap_80", "install.spend_cap_100"]

    # Raising the cap lets runs start again: this one pauses at the gate. Back at the cap,
    # continuing it is refused too, and it stays paused.
    assert (await limits(client, install_id, key, monthlyCapCents=1000)).status == 200
    llm.script(text="first step", input_tokens=1, output_tokens=1)
    again = await client.post(f"/api/installs/{install_id}/run", json={"task": "go"}, headers=key)
    assert again.status == 200 and (await again.json())["pausedAtGate"] == "g"
    assert (await limits(client, install_id, key, monthlyCapCents=125)).status == 200
    calls = len(llm.requests)
    resumed = await client.post(f"/api/installs/{install_id}/continue", json={}, headers=key)
    assert resumed.status == 409 and (await resumed.json())["spentCents"] == 125
    second = (await again.json())["runId"]
    assert (await store["pipeline_runs"].find_one({"_id": second}))["status"] == "paused"
    assert len(llm.requests) == calls

    # Cleared: no check at all.
    assert (await limits(client, install_id, key, monthlyCapCents=None)).status == 200
    llm.script(text="second step", input_tokens=1, output_tokens=1)
    assert (await client.post(f"/api/installs/{install_id}/continue", json={}, headers=key)).status == 200
    await wait_status(store, second, "completed")


def script_overrun(llm: Any) -> None:
    """The lead delegates (60 tokens), the helper answers (50): 110 >= a cap of 100, so the lead's
    next model call is never made, though the script would go on delegating forever."""
    llm.script(
        tool_calls=[{"name": "delegate_helper", "arguments": {"task": "dig"}}],
        input_tokens=50,
        output_tokens=10,
    )
    llm.script(text="found it", input_tokens=30, output_tokens=20)
    for _ in range(5):
        llm.script(
            tool_calls=[{"name": "delegate_helper", "arguments": {"task": "more"}}],
            input_tokens=50,
            output_tokens=10,
        )


async def test_a_run_crossing_its_token_cap_stops_at_the_next_step_and_is_recorded_failed(
    make_client, aiohttp_server, store
):
    llm, url = await start_llm(aiohttp_server)
    client = await make_client(rate_limit_multiplier=None, providers=provider_settings(url))
    _caller, key, install_id = await svc_install(client, [member("lead"), member("helper", reportsTo="lead")])
    assert (await limits(client, install_id, key, runTokenCap=100)).status == 200
    script_overrun(llm)
    response = await client.post(f"/api/installs/{install_id}/run", json={"task": "go"}, headers=key)
    assert response.status == 200, await response.text()
    outcome = await response.json()
    assert outcome["status"] == "failed"
    assert outcome["errorMessage"] == "Stopped at the run's token cap: 110 tokens used, cap 100"
    assert (outcome["inputTokens"], outcome["outputTokens"]) == (80, 30)
    assert len(llm.requests) == 2
    run = await store["pipeline_runs"].find_one({"_id": outcome["runId"]})
    assert run["status"] == "failed" and run["inputTokens"] + run["outputTokens"] == 110
    record = await store["runs"].find_one({"installId": install_id, "runId": outcome["runId"]})
    assert record["status"] == "failed" and record["inputTokens"] == 80


async def test_a_run_stopped_by_its_token_cap_is_billed_as_usage(make_client, aiohttp_server, store):
    llm, url = await start_llm(aiohttp_server)
    client = await make_client(**payment_settings(None, providers=provider_settings(url)))
    builder = await signup(client)
    builder_key = await create_key(client, builder)
    team = {"version": "v1", "agents": [member("lead"), member("helper", reportsTo="lead")]}
    template = await publish_template(
        client,
        builder_key,
        pricingModel="per_k_tokens",
        priceUsdCents=10,
        definition=team,
        visibility="public",
    )
    deal = await paid_install(client, None, builder=(builder, builder_key), template=template)
    key = bearer(deal.deployer_key)
    assert (await limits(client, deal.install_id, key, runTokenCap=100)).status == 200
    script_overrun(llm)
    response = await client.post(f"/api/installs/{deal.install_id}/run", json={"task": "go"}, headers=key)
    outcome = await response.json()
    assert outcome["status"] == "failed" and outcome["errorMessage"].startswith(
        "Stopped at the run's token cap"
    )
    # A run that failed for another reason (10 model calls without an answer: 30 tokens, under
    # the cap) is not billed.
    llm.replies.clear()  # the overrun's unused replies
    for _ in range(10):
        llm.script(tool_calls=[{"name": "nope", "arguments": {}}], input_tokens=2, output_tokens=1)
    other = await client.post(f"/api/installs/{deal.install_id}/run", json={"task": "go"}, headers=key)
    assert (await other.json())["errorMessage"].endswith("did not finish within 10 iterations")

    async def usage() -> dict[str, Any]:
        body = await (await billing(client, builder_key, templateSlug=template["slug"])).json()
        return dict(body["usage"], amountCents=body["billing"]["totalAmountCents"])

    expected = {"totalRuns": 2, "completedRuns": 0, "totalTokens": 140, "billedTokens": 110, "amountCents": 2}

    async def counted() -> bool:  # the run record is written just after the run's status
        return await usage() == expected

    assert await wait_for(counted), await usage()  # 110 tokens at 10 cents per 1K: 1.1 -> 2 cents
