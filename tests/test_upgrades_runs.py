"""Runs across a move on the managed runtime: a run started before an upgrade finishes on its
version (its first model call held in flight by the fake), a paused pipeline resumes on its
version, new runs use the new one, and a run racing an upgrade runs one whole version
(docs/upgrades.md)."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.fakes.llm import FakeLLM
from tests.support.accounts import bearer, create_key, signup
from tests.support.runtime import provider_settings
from tests.support.templates import publish_template
from tests.support.upgrades import move, move_ok, publish_next
from tests.support.waiting import eventually, wait_status


def lead_and_helper(version: str, **fields: Any) -> dict[str, Any]:
    """A lead that may delegate to a helper, both prompts naming the version."""
    return {
        "version": "v1",
        "agents": [
            {"key": "lead", "name": "Lead", "model": "providerA:small", "prompt": f"Lead {version}."},
            {
                "key": "helper",
                "name": "Helper",
                "model": "providerA:small",
                "prompt": f"Helper {version}.",
                "reportsTo": "lead",
            },
        ],
        **fields,
    }


async def setup(
    make_client: Any, aiohttp_server: Any, team: dict[str, Any]
) -> tuple[Any, FakeLLM, str, dict[str, str], str]:
    llm = FakeLLM("providerA")
    server = await aiohttp_server(llm.app())
    client = await make_client(rate_limit_multiplier=None, providers=provider_settings(llm.url(server)))
    caller = await signup(client)
    key = await create_key(client, caller)
    template = await publish_template(client, key, definition=team)
    made = await client.post(
        "/api/installs", json={"templateId": template["id"], "platform": "svc"}, headers=bearer(key)
    )
    assert made.status == 201, await made.text()
    return client, llm, key, bearer(key), (await made.json())["installId"]


def systems(llm: FakeLLM) -> list[str]:
    """The system prompt of each model call, in order."""
    return [request.body["system"] for request in llm.requests]


async def test_a_run_in_flight_finishes_on_its_version_and_new_runs_use_the_new_one(
    make_client, aiohttp_server, store
):
    client, llm, key, headers, install_id = await setup(make_client, aiohttp_server, lead_and_helper("one"))
    llm.holding = True  # every model call waits, recorded, until the test lets them go
    llm.script(tool_calls=[{"name": "delegate_helper", "arguments": {"task": "help"}}])
    llm.script(text="helped")
    llm.script(text="done")
    body = {"task": "go", "wait": False}
    started = await client.post(f"/api/installs/{install_id}/run", json=body, headers=headers)
    run_id = (await started.json())["runId"]
    await eventually(lambda: llm.requests, "the lead's first model call is in flight")

    template_id = (await store.installs.find_one({"_id": install_id}))["templateId"]
    await publish_next(client, key, template_id, lead_and_helper("two"), "new prompts")
    moved = await move_ok(client, headers, install_id)
    assert moved["toVersion"] == 2
    llm.holding = False

    run = await wait_status(store, run_id, "completed")
    assert run["templateVersion"] == 1
    calls = systems(llm)
    assert len(calls) == 3
    # Every step of the run in flight, the delegate called after the upgrade included, ran version 1.
    assert "Lead one." in calls[0] and "Helper one." in calls[1] and "Lead one." in calls[2]

    llm.script(text="fresh")
    fresh = await client.post(f"/api/installs/{install_id}/run", json={"task": "again"}, headers=headers)
    assert fresh.status == 200, await fresh.text()
    assert "Lead two." in systems(llm)[-1]
    again = await store["pipeline_runs"].find_one({"_id": (await fresh.json())["runId"]})
    assert again["templateVersion"] == 2


async def test_a_paused_pipeline_keeps_its_version_until_it_ends(make_client, aiohttp_server, store):
    gates = [{"name": "review", "after": "lead"}]
    team = lead_and_helper("one", gates=gates)
    team["agents"][1].pop("reportsTo")
    client, llm, key, headers, install_id = await setup(make_client, aiohttp_server, team)
    llm.script(text="lead out")
    run_url = f"/api/installs/{install_id}/run"
    paused = await (await client.post(run_url, json={"task": "go"}, headers=headers)).json()
    assert paused["status"] == "paused"

    template_id = (await store.installs.find_one({"_id": install_id}))["templateId"]
    newer = lead_and_helper("two", gates=gates)
    newer["agents"][1].pop("reportsTo")
    await publish_next(client, key, template_id, newer, "new prompts")
    await move_ok(client, headers, install_id)

    llm.script(text="helper out")
    response = await client.post(f"/api/installs/{install_id}/continue", json={}, headers=headers)
    assert response.status == 200, await response.text()
    await wait_status(store, paused["runId"], "completed")
    assert "Helper one." in systems(llm)[-1], "the continued step ran the version the run started on"

    llm.script(text="lead again")
    second = await (await client.post(run_url, json={"task": "go"}, headers=headers)).json()
    assert second["status"] == "paused" and "Lead two." in systems(llm)[-1]


async def test_runs_racing_an_upgrade_each_run_one_whole_version(make_client, aiohttp_server, store):
    client, llm, key, headers, install_id = await setup(make_client, aiohttp_server, lead_and_helper("one"))
    llm.default_text = "ok"
    template_id = (await store.installs.find_one({"_id": install_id}))["templateId"]
    await publish_next(client, key, template_id, lead_and_helper("two"), "v2")
    for round_ in range(3):
        direction = "upgrade" if round_ % 2 == 0 else "rollback"
        runs = [
            client.post(
                f"/api/installs/{install_id}/run",
                json={"task": f"r{round_}-{i}", "wait": False},
                headers=headers,
            )
            for i in range(4)
        ]
        answers = await asyncio.gather(move(client, headers, install_id, direction), *runs)
        assert answers[0].status == 200, await answers[0].text()
        for answer in answers[1:]:
            assert answer.status == 202, await answer.text()
            run_id = (await answer.json())["runId"]
            run = await wait_status(store, run_id, "completed")
            prompts = [
                r.body["system"] for r in llm.requests if r.body["messages"][0]["content"] == run["task"]
            ]
            assert prompts, "the run called the model"
            word = "one" if run["templateVersion"] == 1 else "two"
            assert all(f"Lead {word}." in prompt for prompt in prompts), (run["templateVersion"], prompts)


async def test_schedule_webhook_token_caps_variables_and_secrets_carry_over(
    make_client, aiohttp_server, store
):
    client, llm, key, headers, install_id = await setup(make_client, aiohttp_server, lead_and_helper("one"))
    base = f"/api/installs/{install_id}"
    schedule = await client.patch(
        f"{base}/schedule", json={"cronExpression": "0 9 * * 1", "label": "Monday digest"}, headers=headers
    )
    assert schedule.status == 200, await schedule.text()
    limits = await client.patch(f"{base}/limits", json={"runTokenCap": 5000}, headers=headers)
    assert limits.status == 200, await limits.text()
    secret = await client.patch(f"{base}/secrets", json={"API_TOKEN": "kept"}, headers=headers)
    assert secret.status == 200
    before = await store.installs.find_one({"_id": install_id})
    token = before["webhookTokenHash"]

    template_id = before["templateId"]
    await publish_next(client, key, template_id, lead_and_helper("two"), "new prompts")
    await move_ok(client, headers, install_id)

    after = await store.installs.find_one({"_id": install_id})
    assert after["webhookTokenHash"] == token
    assert after["limits"] == before["limits"] and after["secretsEncrypted"] == before["secretsEncrypted"]
    kept = (await (await client.get(f"{base}/schedule", headers=headers)).json())["schedule"]
    assert (kept["cronExpression"], kept["label"]) == ("0 9 * * 1", "Monday digest")
    llm.script(text="scheduled")
    fired = await client.post(f"{base}/schedule/trigger", headers=headers)
    assert fired.status == 200, await fired.text()
    run_id = (await fired.json())["runId"]
    run = await wait_status(store, run_id, "completed")
    assert run["templateVersion"] == 2 and "Lead two." in systems(llm)[-1], (
        "a scheduled run uses the new version"
    )
