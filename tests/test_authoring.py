"""Assisted authoring over SSE against streaming fake providers."""

from __future__ import annotations

import json
import time

from config.catalogue import UPSTREAM
from tests.fakes.llm import DEFAULT_KEY, FakeLLM
from tests.support.accounts import bearer, create_key, signup
from tests.support.waiting import wait_until

VALID = {
    "version": "v1",
    "description": "A support team",
    "agents": [
        {"key": "lead", "name": "Lead", "model": "providerA:small", "prompt": "Lead the team."},
        {
            "key": "helper",
            "name": "Helper",
            "model": "providerB:standard",
            "reportsTo": "lead",
            "prompt": "Help.",
        },
    ],
}


async def setup(aiohttp_server, make_client, **overrides):
    fakes, providers = {}, {}
    for name in ("providerA", "providerB"):
        fake = FakeLLM(name)
        server = await aiohttp_server(fake.app())
        fakes[name] = fake
        providers[name] = {"api_key": DEFAULT_KEY, "base_url": fake.url(server)}
    client = await make_client(providers=providers, **overrides)
    caller = await signup(client)
    key = bearer(await create_key(client, caller))
    return client, key, fakes


async def events_of(response, on_event=None):
    """The SSE events of a response, each with the time it arrived."""
    assert response.headers["Content-Type"].startswith("text/event-stream")
    events = []
    async for raw in response.content:
        line = raw.decode().strip()
        if line.startswith("data: "):
            event = json.loads(line[6:])
            events.append((time.monotonic(), event))
            if on_event is not None:
                on_event(event)
    return [event for _, event in events]


async def test_generate_streams_chunks_as_they_come(aiohttp_server, make_client):
    client, key, fakes = await setup(aiohttp_server, make_client)
    upstream = fakes["providerB"]
    upstream.chunk_delay_s = 0.05
    upstream.script(text=json.dumps(VALID))
    seen_while_streaming = []

    def check(event):
        if "chunk" in event and not seen_while_streaming:
            seen_while_streaming.append(upstream.streams_finished)

    response = await client.post(
        "/api/templates/generate", json={"description": "a support team"}, headers=key
    )
    assert response.status == 200
    events = await events_of(response, check)
    assert seen_while_streaming == [0], "the first chunk arrived while the upstream was still streaming"
    chunks = [e["chunk"] for e in events if "chunk" in e]
    assert len(chunks) > 5 and json.loads("".join(chunks)) == VALID
    assert events[-1]["done"] is True and events[-1]["definition"]["agents"][1]["key"] == "helper"
    sent_model = upstream.requests[0].body["model"]
    assert sent_model == UPSTREAM["providerB:mini"], "generate defaults to providerB:mini"
    assert '"$schema"' in upstream.requests[0].body["messages"][0]["content"], "the schema is in the prompt"


async def test_generate_repairs_an_invalid_definition_once(aiohttp_server, make_client):
    client, key, fakes = await setup(aiohttp_server, make_client)
    upstream = fakes["providerB"]
    broken = {**VALID, "agents": [{**VALID["agents"][0], "model": "providerZ:huge"}]}
    upstream.script(text=json.dumps(broken))
    upstream.script(text=json.dumps(VALID))
    events = await events_of(
        await client.post("/api/templates/generate", json={"description": "x"}, headers=key)
    )
    assert events[-1]["done"] is True
    repair = upstream.requests[1].body
    assert "stream" not in repair or repair["stream"] is False
    assert "agents[0].model" in repair["messages"][-1]["content"], "the validation errors are fed back"
    upstream.script(text=json.dumps(broken))
    upstream.script(text="still not json")
    events = await events_of(
        await client.post("/api/templates/generate", json={"description": "x"}, headers=key)
    )
    assert "error" in events[-1] and "not valid" in events[-1]["error"]


async def test_a_provider_failing_mid_stream_ends_with_an_error_event(aiohttp_server, make_client):
    client, key, fakes = await setup(aiohttp_server, make_client)
    upstream = fakes["providerB"]
    upstream.script(text=json.dumps(VALID))
    upstream.break_stream_after = 4
    events = await events_of(
        await client.post("/api/templates/generate", json={"description": "x"}, headers=key)
    )
    assert any("chunk" in e for e in events)
    assert "error" in events[-1] and DEFAULT_KEY not in events[-1]["error"]


async def test_a_client_leaving_cancels_the_upstream_request(aiohttp_server, make_client):
    client, key, fakes = await setup(aiohttp_server, make_client)
    upstream = fakes["providerB"]
    upstream.chunk_delay_s = 0.1
    upstream.script(text=" ".join(["word"] * 200))
    response = await client.post("/api/templates/generate", json={"description": "x"}, headers=key)
    first = await response.content.readline()
    assert first.startswith(b"data: ")
    response.close()
    await wait_until(lambda: upstream.streams_abandoned, timeout_s=30)
    assert upstream.streams_abandoned == 1 and upstream.streams_finished == 0


async def test_assist_apply_and_discuss(aiohttp_server, make_client):
    client, key, fakes = await setup(aiohttp_server, make_client)
    upstream = fakes["providerA"]
    renamed = {**VALID, "agents": [VALID["agents"][0], {**VALID["agents"][1], "key": "assistant"}]}
    upstream.script(text=json.dumps(renamed))
    body = {
        "currentDefinition": VALID,
        "instruction": "Rename helper to assistant",
        "conversationHistory": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
    }
    events = await events_of(await client.post("/api/templates/assist", json=body, headers=key))
    done = events[-1]
    assert done["done"] is True and done["definition"]["agents"][1]["key"] == "assistant"
    assert done["diffSummary"]["bump"] == "MAJOR"
    assert done["diffSummary"]["removedAgents"] == ["helper"] and done["diffSummary"]["breaking"]
    sent = upstream.requests[0].body
    assert sent["model"] == UPSTREAM["providerA:middle"] and [m["role"] for m in sent["messages"]] == [
        "user",
        "assistant",
        "user",
    ]
    upstream.script(text="Two agents is right for this; a third would only add cost.")
    events = await events_of(
        await client.post(
            "/api/templates/assist",
            json={"currentDefinition": VALID, "instruction": "Is it enough?"},
            headers=key,
        )
    )
    assert events[-1] == {"done": True, "text": "Two agents is right for this; a third would only add cost."}


async def test_test_chat_uses_the_root_agent_as_written(aiohttp_server, make_client):
    client, key, fakes = await setup(aiohttp_server, make_client)
    definition = {
        **VALID,
        "requiredVariables": ["company"],
        "requiredSecrets": ["CRM"],
        "agents": [{**VALID["agents"][0], "prompt": "Work for {{company}} with ${CRM}."}, VALID["agents"][1]],
    }
    fakes["providerA"].script(text="Hello there")
    body = {
        "definition": definition,
        "messages": [
            {"role": "user", "content": "earlier"},
            {"role": "assistant", "content": "noted"},
            {"role": "user", "content": "Say hello"},
        ],
    }
    events = await events_of(await client.post("/api/templates/test-chat", json=body, headers=key))
    assert "".join(e.get("chunk", "") for e in events) == "Hello there" and events[-1] == {"done": True}
    sent = fakes["providerA"].requests[0].body
    assert sent["system"] == "Work for {{company}} with ${CRM}."
    assert sent["model"] == UPSTREAM["providerA:small"]
    assert sent["messages"][-1]["content"] == "Say hello" and len(sent["messages"]) == 3


async def test_bad_input_is_a_400_before_any_stream(aiohttp_server, make_client):
    client, key, fakes = await setup(aiohttp_server, make_client)
    cases = [
        ("/api/templates/generate", {"description": "  "}, "description"),
        ("/api/templates/generate", {"description": "x", "model": "providerC:pro"}, "providerB:mini"),
        (
            "/api/templates/assist",
            {"currentDefinition": {"agents": []}, "instruction": "x"},
            "currentDefinition",
        ),
        ("/api/templates/assist", {"currentDefinition": VALID, "instruction": ""}, "instruction"),
        ("/api/templates/test-chat", {"definition": VALID, "messages": []}, "messages"),
        (
            "/api/templates/test-chat",
            {"definition": VALID, "messages": [{"role": "assistant", "content": "x"}]},
            "last message",
        ),
    ]
    for path, body, word in cases:
        response = await client.post(path, json=body, headers=key)
        assert response.status == 400, (path, body)
        assert response.headers["Content-Type"].startswith("application/json")
        assert word in (await response.json())["error"], (path, body)
    assert sum(len(f.requests) for f in fakes.values()) == 0
    assert (await client.post("/api/templates/generate", json={"description": "x"})).status == 401


async def test_public_generate_uses_the_small_model_and_is_rate_limited(aiohttp_server, make_client):
    client, _, fakes = await setup(aiohttp_server, make_client)
    for _ in range(5):
        fakes["providerA"].script(text=json.dumps(VALID))
        response = await client.post(
            "/api/templates/generate/public", json={"description": "x", "model": "providerB:mini"}
        )
        assert response.status == 200
        assert (await events_of(response))[-1]["done"] is True
    assert {r.body["model"] for r in fakes["providerA"].requests} == {UPSTREAM["providerA:small"]}
    response = await client.post("/api/templates/generate/public", json={"description": "x"})
    assert response.status == 429 and int(response.headers["Retry-After"]) > 0


async def test_an_unconfigured_provider_is_503_before_streaming(make_client):
    client = await make_client()
    caller = await signup(client)
    key = bearer(await create_key(client, caller))
    response = await client.post("/api/templates/generate", json={"description": "x"}, headers=key)
    assert response.status == 503 and "not configured" in (await response.json())["error"]
