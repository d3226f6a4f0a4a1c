"""GET /metrics: the Prometheus text format, the scrape token, HTTP metrics by route template, and
deployment metrics counted where they happen (in Ray actors) and read from MongoDB on scrape."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from api.metrics import open_to_network
from config.settings import Settings
from svc.core import (
    LAG_BUCKETS,
    count_metric,
    counter_increment,
    histogram_observation,
    observe_metric,
    read_metrics,
    write_metrics,
)
from tests.support.accounts import bearer
from tests.support.cli import run_cli
from tests.support.runtime import member, provider_settings, start_llm, start_target, svc_install
from tests.support.waiting import wait_for
from tests.test_runtime_runs import http_call, run


async def scrape(client: Any, **headers: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, keyed by (name, sorted labels)."""
    response = await client.get("/metrics", headers=headers)
    assert response.status == 200, await response.text()
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for family in text_string_to_metric_families(await response.text()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


async def test_requests_are_counted_by_route_template_and_status(make_client):
    client = await make_client(rate_limit_multiplier=None)
    for _ in range(2):
        await client.get("/api/installs/not-an-install/schedule", headers=bearer("svc_live_" + "0" * 32))
    await client.get("/api/nowhere")
    await client.get("/api/health")
    samples = await scrape(client)
    route = "/api/installs/{id}/schedule"
    assert value(samples, "svc_http_requests_total", method="GET", route=route, status="401") == 2
    assert value(samples, "svc_http_requests_total", method="GET", route="unmatched", status="404") == 1
    assert value(samples, "svc_http_request_duration_seconds_count", method="GET", route=route) == 2
    assert (
        value(samples, "svc_http_request_duration_seconds_bucket", method="GET", route=route, le="+Inf") == 2
    )
    assert not any("not-an-install" in str(key) for key in samples), "raw paths never become labels"
    for name in ("svc_runs_queued", "svc_mail_queued", "svc_install_actors_active"):
        assert value(samples, name) is not None, name


async def test_the_scrape_token(make_client):
    client = await make_client(metrics_token="scrape-secret")
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "scrape-secret"}):
        response = await client.get("/metrics", headers=headers)
        assert response.status == 401
        body = await response.json()
        assert set(body) == {"error"} and "scrape-secret" not in body["error"]
    samples = await scrape(client, Authorization="Bearer scrape-secret")
    assert value(samples, "svc_http_requests_total", method="GET", route="/metrics", status="401") == 3


@pytest.mark.parametrize(
    ("listening", "token", "refused"),
    [
        ("127.0.0.1", None, False),
        ("127.0.0.2", None, False),
        ("::1", None, False),
        ("0.0.0.0", None, True),
        ("::", None, True),
        ("10.1.2.3", None, True),
        ("fe80::1%eth0", None, True),
        ("0.0.0.0", "scrape-secret", False),
    ],
)
def test_the_token_is_required_off_loopback(listening, token, refused):
    reason = open_to_network(Settings.from_env({}, metrics_token=token), listening)
    assert (reason is not None) == refused
    if refused:
        assert reason.startswith("SVC_METRICS_TOKEN is required") and listening in reason


def test_serve_on_every_interface_without_a_token_stops_with_one_line(
    tmp_path, secret_key, monkeypatch, capsys
):
    """`svc serve --host 0.0.0.0` as an operator runs it (in this process: tests/support/cli.py);
    it stops before starting the database or Ray."""
    monkeypatch.chdir(tmp_path)  # no .env of the checkout
    monkeypatch.setenv("SVC_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SVC_SECRET_KEYS", secret_key)
    for name in ("SVC_MONGODB_URI", "SVC_METRICS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    assert run_cli(["serve", "--host", "0.0.0.0", "--port", "0"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("error: SVC_METRICS_TOKEN is required when svc serve listens on 0.0.0.0,")
    assert not (tmp_path / "data").exists(), "neither the database nor the vault was started"


async def test_rate_limit_refusals_are_counted(make_client):
    client = await make_client(rate_limit_multiplier=0.01)
    statuses = [
        (await client.post("/api/auth/login", json={"email": "a@b.c", "password": "x" * 8})).status
        for _ in range(4)
    ]
    assert 429 in statuses
    samples = await scrape(client)
    refused = statuses.count(429)
    assert value(samples, "svc_rate_limit_refusals_total", route="/api/auth/login") == refused


async def test_runs_tokens_blocks_and_judge_decisions_reach_the_scrape(make_client, aiohttp_server, store):
    llm, url = await start_llm(aiohttp_server)
    client = await make_client(rate_limit_multiplier=None, providers=provider_settings(url))
    target = await start_target(aiohttp_server)
    policy = {
        "accessPolicyVersion": "1",
        "defaultAction": "deny",
        "rules": [
            {"match": {"pathPrefix": "/no"}, "action": "deny", "reason": "not for agents"},
            {"match": {"pathPrefix": "/ask"}, "action": "require_approval", "reason": "sensitive"},
        ],
    }
    _, key, install_id = await svc_install(client, [member("lead", accessPolicy=policy)])
    llm.script(
        tool_calls=[http_call(f"{target.base}/no"), http_call(f"{target.base}/ask")],
        input_tokens=100,
        output_tokens=10,
    )
    llm.script(
        text='{"decision": "allow", "reasoning": "fine", "confidence": 0.9}', input_tokens=7, output_tokens=3
    )
    llm.script(text="done", input_tokens=50, output_tokens=5)
    assert (await run(client, key, install_id))["status"] == "completed"
    await store["pipeline_runs"].insert_one({"_id": "waiting", "installId": install_id, "status": "queued"})

    # The actor writes model-call token counts and its settled runs' metrics once a second
    # (metric_counters.Buffered), not per call or per run.
    samples: dict[Any, float] = {}

    async def counted() -> bool:
        samples.clear()
        samples.update(await scrape(client))
        return (
            value(samples, "svc_llm_tokens_total", provider="providerA", kind="output") == 18
            and value(samples, "svc_runs_total", platform="svc", status="completed") == 1
        )

    assert await wait_for(counted, 30), "the actor's buffered counts never reached the scrape"
    assert value(samples, "svc_runs_total", platform="svc", status="completed") == 1
    assert value(samples, "svc_run_duration_seconds_count", platform="svc") == 1
    assert value(samples, "svc_llm_tokens_total", provider="providerA", kind="input") == 157
    assert value(samples, "svc_llm_tokens_total", provider="providerA", kind="output") == 18
    assert value(samples, "svc_judge_decisions_total", decision="allow") == 1
    assert value(samples, "svc_egress_blocks_total", by="policy") == 1
    assert value(samples, "svc_runs_queued") == 1
    assert value(samples, "svc_install_actors_active") >= 1

    # Stored counters and histograms from any process come out the same way.
    await count_metric(store, "payment_failures", {"reason": "declined"})
    await observe_metric(store, "scheduler_lag_seconds", {}, [0.2, 3.0], LAG_BUCKETS)
    samples = await scrape(client)
    assert value(samples, "svc_payment_failures_total", reason="declined") == 1
    assert value(samples, "svc_scheduler_lag_seconds_bucket", le="0.5") == 1
    assert value(samples, "svc_scheduler_lag_seconds_bucket", le="+Inf") == 2
    assert value(samples, "svc_scheduler_lag_seconds_sum") == 3.2


async def test_counter_writes_racing_from_many_processes_lose_nothing(db_uri, store):
    # Each writer is its own client, as each actor and API process is: one bulk write per change
    # set, every label set's increments exact. (The embedded server applies upserts one at a
    # time, so the retry of a lost first-insert race in `write_metrics` is reached on MongoDB
    # only.)
    from svc.core.store import Store

    writers = [Store.connect(db_uri) for _ in range(8)]
    try:
        await asyncio.gather(
            *(
                write_metrics(
                    writer,
                    [
                        counter_increment("races", {"kind": "a"}, 2),
                        counter_increment("races", {"kind": "b"}),
                        histogram_observation("race_lag", {}, [0.2, 7.0], LAG_BUCKETS),
                    ],
                )
                for writer in writers
                for _ in range(5)
            )
        )
    finally:
        for writer in writers:
            await writer.close()
    docs = {doc["_id"]: doc for doc in await read_metrics(store)}
    assert docs["races|kind=a"]["value"] == 80 and docs["races|kind=b"]["value"] == 40
    assert docs["race_lag|"]["count"] == 80 and docs["race_lag|"]["buckets"] == {"0": 40, "4": 40}
