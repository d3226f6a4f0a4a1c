"""Per-IP rate limits, shared through MongoDB by every API process."""

from __future__ import annotations

import asyncio
import time

import time_machine

from tests.support.waiting import eventually


async def hit(client, path, times, method="GET", headers=None):
    """Send the same request `times` times; return the statuses in order."""
    statuses = []
    for _ in range(times):
        response = await client.request(method, path, headers=headers)
        statuses.append(response.status)
    return statuses


async def test_auth_scope_allows_20_then_429_with_retry_after(client):
    statuses = await hit(client, "/api/auth/me", 20)
    assert statuses == [401] * 20
    response = await client.get("/api/auth/me")
    assert response.status == 429
    assert (await response.json())["error"]
    retry_after = int(response.headers["Retry-After"])
    assert 1 <= retry_after <= 15 * 60


async def test_other_paths_are_not_limited_by_the_auth_scope(client):
    await hit(client, "/api/auth/me", 21)
    response = await client.get("/api/nowhere")
    assert response.status == 404


async def test_global_scope_allows_300(make_client):
    client = await make_client()
    statuses = await asyncio.gather(*(client.get("/api/nowhere") for _ in range(300)))
    assert {r.status for r in statuses} == {404}
    response = await client.get("/api/nowhere")
    assert response.status == 429
    assert "Retry-After" in response.headers


async def test_public_generate_scope_is_5_per_hour(client):
    statuses = await hit(client, "/api/templates/generate/public", 5, method="POST")
    assert 429 not in statuses
    response = await client.post("/api/templates/generate/public")
    assert response.status == 429
    assert 1 <= int(response.headers["Retry-After"]) <= 3600


async def test_counters_are_shared_by_two_app_instances(make_client, store):
    # The 21 requests fall in one window: the clock starts on an hour boundary, where every window
    # length (a divisor of an hour) starts too, so no window turns over between them.
    hour = 3600
    with time_machine.travel((time.time() // hour + 1) * hour + 1, tick=True):
        await both_instances_share_the_counter(make_client, store)


async def both_instances_share_the_counter(make_client, store):
    first = await make_client()
    second = await make_client()
    assert await hit(first, "/api/auth/me", 10) == [401] * 10
    assert await hit(second, "/api/auth/me", 10) == [401] * 10

    # Within the first half of a limit each process counts locally and flushes shortly after
    # (svc/identity/ratelimit.py); once both flushes have landed, the shared counter decides.
    async def counted() -> bool:
        return sum(doc.get("auth", 0) for doc in await store.rate_limits.find({}).to_list(10)) == 20

    await eventually(counted, "both processes' counts in the shared counter")
    assert (await first.get("/api/auth/me")).status == 429
    assert (await second.get("/api/auth/me")).status == 429


async def test_concurrent_requests_across_instances_never_exceed_the_limit(make_client):
    first = await make_client()
    second = await make_client()
    responses = await asyncio.gather(
        *(client.get("/api/auth/me") for client in (first, second) for _ in range(20))
    )
    statuses = [r.status for r in responses]
    assert statuses.count(401) == 20
    assert statuses.count(429) == 20


async def test_multiplier_scales_limits(make_client):
    client = await make_client(rate_limit_multiplier=2.0)
    assert await hit(client, "/api/auth/me", 40) == [401] * 40
    assert (await client.get("/api/auth/me")).status == 429


async def test_off_disables_limits(make_client):
    client = await make_client(rate_limit_multiplier=None)
    assert 429 not in await hit(client, "/api/auth/me", 30)


async def test_forwarded_for_is_ignored_from_untrusted_peers(client):
    for n in range(20):
        response = await client.get("/api/auth/me", headers={"X-Forwarded-For": f"203.0.113.{n}"})
        assert response.status == 401
    response = await client.get("/api/auth/me", headers={"X-Forwarded-For": "198.51.100.1"})
    assert response.status == 429


async def test_forwarded_for_is_believed_from_trusted_proxies(make_client):
    client = await make_client(trusted_proxies=("127.0.0.0/8",))
    alice = {"X-Forwarded-For": "203.0.113.7"}
    assert await hit(client, "/api/auth/me", 20, headers=alice) == [401] * 20
    assert (await client.get("/api/auth/me", headers=alice)).status == 429
    bob = {"X-Forwarded-For": "203.0.113.8"}
    assert (await client.get("/api/auth/me", headers=bob)).status == 401
    # A client cannot escape by prepending a forged hop: the nearest untrusted hop counts.
    forged = {"X-Forwarded-For": "10.9.9.9, 203.0.113.7"}
    assert (await client.get("/api/auth/me", headers=forged)).status == 429


async def test_health_is_exempt(client):
    statuses = await asyncio.gather(*(client.get("/api/health") for _ in range(310)))
    assert {r.status for r in statuses} == {200}


async def test_locally_counted_requests_reach_the_shared_counter(client, store):
    await hit(client, "/api/nowhere", 5)

    async def counted() -> list[dict]:
        docs = await store.rate_limits.find({}).to_list(10)
        return docs if sum(doc.get("all", 0) for doc in docs) == 5 else []

    docs = await eventually(counted, "the 5 requests in the shared counter", timeout_s=30)
    assert all(doc["expiresAt"] for doc in docs), "every counter expires through the TTL index"


async def test_every_forwarded_for_line_counts(make_client):
    client = await make_client(trusted_proxies=("127.0.0.0/8",))
    # A client forges a first line; the proxy appends its own line with the real address.
    for n in range(20):
        headers = [("X-Forwarded-For", f"6.6.6.{n}"), ("X-Forwarded-For", "203.0.113.50")]
        assert (await client.get("/api/auth/me", headers=headers)).status == 401
    headers = [("X-Forwarded-For", "6.6.6.99"), ("X-Forwarded-For", "203.0.113.50")]
    assert (await client.get("/api/auth/me", headers=headers)).status == 429


def test_ipv6_clients_share_a_bucket_per_64():
    from api.clientip import bucket

    assert bucket("2001:db8:1:2::1") == bucket("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
    assert bucket("::ffff:203.0.113.7") == "203.0.113.7"
    assert bucket("203.0.113.7") == "203.0.113.7"
