"""Conflicting requests fired at once over real HTTP, many times: every rule that spans records
holds, and every count that must be exact is (docs/consistency.md).

Each race is repeated `ROUNDS` times with several contenders per round, enough to catch
an interleaving that wins one time in twenty. A loser gets the answer the rule gives
when the calls come one after another (409, or 404 for a record that is gone), never a
500 and never a half-done change.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from api.heavy import BUSY, HEAVY_GATE, HEAVY_SLOTS
from tests.support.accounts import bearer, create_key, signup
from tests.support.installs import managed_install as svc_install
from tests.support.orgs import create_org, join, ok, org_key, send
from tests.support.runs import ingest_body, orch_a_install, start_paperclip
from tests.support.runtime import member, provider_settings, start_llm
from tests.support.templates import (
    create_template,
    new_version,
    publish_template,
    template_body,
    user_with_key,
)

ROUNDS = 20


async def statuses(*responses: Any) -> list[int]:
    for response in responses:
        await response.read()
    return [response.status for response in responses]


def install_call(client: Any, key: str, template_id: str) -> Any:
    return client.post(
        "/api/installs", json={"templateId": template_id, "platform": "svc"}, headers=bearer(key)
    )


def delete_template(client: Any, key: str, template_id: str) -> Any:
    return client.delete(f"/api/templates/{template_id}", headers=bearer(key))


async def active_installs(store: Any, template_id: str) -> int:
    return int(
        await store.installs.count_documents({"templateId": template_id, "status": {"$ne": "cancelled"}})
    )


async def test_delete_and_install_at_once_never_both_win(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    caller, key = await user_with_key(client)
    outcomes: Counter[str] = Counter()
    for _ in range(ROUNDS):
        template = await publish_template(client, key, visibility="public")
        tid = template["id"]
        # An svc install binds the key that made it, so each install gets a fresh key.
        keys = [await create_key(client, caller) for _ in range(2)]
        deleted, *installed = await statuses(
            *await asyncio.gather(
                delete_template(client, key, tid),
                *(install_call(client, fresh, tid) for fresh in keys),
            )
        )
        assert deleted in (204, 409), deleted
        assert all(status in (201, 404, 409) for status in installed), installed
        exists = await store["templates"].count_documents({"_id": tid})
        active = await active_installs(store, tid)
        if deleted == 204:
            # The delete won: no install of the deleted template exists, every install lost.
            assert not exists and active == 0 and 201 not in installed, (deleted, installed, active)
            outcomes["deleted"] += 1
        else:
            # An install won: the template stays, with exactly the installs that were answered 201.
            assert exists and active == installed.count(201) >= 1, (installed, active)
            doc = await store["templates"].find_one({"_id": tid})
            assert doc["activeInstalls"] == active
            outcomes["installed"] += 1
    assert sum(outcomes.values()) == ROUNDS


async def test_delete_and_new_version_at_once_never_both_win(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    _, key = await user_with_key(client)
    for _ in range(ROUNDS):
        template = await publish_template(client, key)
        tid = template["id"]
        deleted, *opened = await statuses(
            *await asyncio.gather(
                delete_template(client, key, tid),
                new_version(client, key, tid),
                client.post(f"/api/templates/{tid}/rollback", json={"version": 1}, headers=bearer(key)),
            )
        )
        assert deleted in (204, 409) and all(status in (201, 404, 409) for status in opened), (
            deleted,
            opened,
        )
        assert opened.count(201) <= 1, opened
        drafts = await store["templates"].count_documents({"kind": "version_draft", "parentTemplateId": tid})
        if deleted == 204:
            # The delete won: no draft was opened, none outlives the parent.
            assert 201 not in opened and drafts == 0, (opened, drafts)
            assert not await store["templates"].count_documents({"_id": tid})
        else:
            # A draft won: the template stays with exactly that draft.
            assert opened.count(201) == 1 and drafts == 1, (opened, drafts)


async def test_archive_and_install_at_once_count_exactly(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    caller, key = await user_with_key(client)
    for _ in range(ROUNDS // 2):
        template = await publish_template(client, key, visibility="public")
        tid = template["id"]
        keys = [await create_key(client, caller) for _ in range(3)]
        responses = await asyncio.gather(
            client.post(f"/api/templates/{tid}/archive", headers=bearer(key)),
            *(install_call(client, fresh, tid) for fresh in keys[:2]),
        )
        archived, *installed = await statuses(*responses)
        assert archived == 200 and all(s in (201, 409) for s in installed), (archived, installed)
        body = await responses[0].json()
        active = await active_installs(store, tid)
        assert (
            active
            == installed.count(201)
            == (await store["templates"].find_one({"_id": tid}))["activeInstalls"]
        )
        assert body["installCount"] <= active  # installs claimed before the archive are counted
        # Archived now: a later install is refused, and a delete waits for the installs to go.
        assert (await statuses(await install_call(client, keys[2], tid))) == [409]
        expected = 409 if active else 204
        assert (await statuses(await delete_template(client, key, tid))) == [expected]


async def test_one_active_version_draft_across_new_version_and_rollback(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    _, key = await user_with_key(client)
    for _ in range(ROUNDS // 2):
        template = await publish_template(client, key)
        tid = template["id"]
        calls = [new_version(client, key, tid) for _ in range(3)]
        calls += [
            client.post(f"/api/templates/{tid}/rollback", json={"version": 1}, headers=bearer(key))
            for _ in range(3)
        ]
        codes = await statuses(*await asyncio.gather(*calls))
        assert Counter(codes) == Counter({201: 1, 409: 5}), codes
        assert (
            await store["templates"].count_documents({"kind": "version_draft", "parentTemplateId": tid}) == 1
        )


async def test_cancel_and_install_counts_release_once(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    caller, key = await user_with_key(client)
    template = await publish_template(client, key, visibility="public")
    tid = template["id"]
    for _ in range(ROUNDS // 4):
        installer = await create_key(client, caller)
        install_id = (await svc_install(client, installer, tid))["installId"]
        codes = await statuses(
            *await asyncio.gather(
                *(client.delete(f"/api/installs/{install_id}", headers=bearer(installer)) for _ in range(3))
            )
        )
        assert Counter(codes) == Counter({200: 1, 409: 2}), codes
    assert (await store["templates"].find_one({"_id": tid}))["activeInstalls"] == 0
    assert (await statuses(await delete_template(client, key, tid))) == [204]


async def test_org_deletion_and_template_creation_at_once(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    owner = await signup(client)
    for _ in range(ROUNDS // 2):
        org = await create_org(client, owner)
        key = await org_key(client, owner, org["slug"])
        responses = await asyncio.gather(
            send(client, owner, "DELETE", f"/api/orgs/{org['slug']}"),
            *(client.post("/api/templates", json=template_body(), headers=bearer(key)) for _ in range(2)),
        )
        deleted, *created = await statuses(*responses)
        assert deleted in (200, 204), deleted
        assert all(status in (201, 401, 404) for status in created), created
        # Nothing is left owned by the deleted org: a template made before the deletion went back
        # to the owner, one made after it was undone.
        assert not await store["templates"].count_documents({"owner.kind": "org", "owner.id": org["id"]})
        for response, status in zip(responses[1:], created, strict=True):
            if status == 201:
                made = await store["templates"].find_one({"_id": (await response.json())["id"]})
                assert made is not None and made["owner"] == {"kind": "user", "id": owner.id}


async def test_member_removal_and_that_members_next_request(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    owner = await signup(client)
    org = await create_org(client, owner)
    base = f"/api/orgs/{org['slug']}"
    for _ in range(ROUNDS // 4):
        someone = await join(client, owner, org["slug"])
        responses = await asyncio.gather(
            send(client, owner, "DELETE", f"{base}/members/{someone.id}"),
            send(client, someone, "GET", base),
            send(client, someone, "GET", f"{base}/members"),
        )
        removed, *reads = await statuses(*responses)
        assert removed in (200, 204) and all(s in (200, 404) for s in reads), (removed, reads)
        # Once the removal has answered, the next request through the org is refused.
        assert (await statuses(await send(client, someone, "GET", base))) == [404]
        assert (await statuses(await send(client, someone, "GET", f"{base}/members"))) == [404]


async def test_install_cancellation_and_a_run_starting(make_client, store, aiohttp_server):
    _llm, url = await start_llm(aiohttp_server)
    client = await make_client(rate_limit_multiplier=None, providers=provider_settings(url))
    caller = await signup(client)
    key = await create_key(client, caller)
    team = {"version": "v1", "agents": [member("lead")]}
    template = await publish_template(client, key, visibility="public", definition=team)
    for _ in range(3):
        key = await create_key(client, caller)
        install_id = (await svc_install(client, key, template["id"]))["installId"]

        async def cancel(install_id: str = install_id, key: str = key) -> tuple[Any, datetime]:
            response = await client.delete(f"/api/installs/{install_id}", headers=bearer(key))
            await response.read()
            return response, datetime.now(UTC)

        run, (cancelled, answered_at) = await asyncio.gather(
            client.post(f"/api/installs/{install_id}/run", json={"task": "go"}, headers=bearer(key)),
            cancel(),
        )
        run_status = (await statuses(run))[0]
        assert cancelled.status == 200 and run_status in (200, 409), (run_status, await run.text())
        started = await store["pipeline_runs"].find({"installId": install_id}).to_list(None)
        if run_status == 200:
            # The run started while the install was ready: before the cancellation answered.
            (record,) = started
            assert record["startedAt"].replace(tzinfo=UTC) <= answered_at, "a run started after the cancel"
        else:
            assert (await run.json())["error"] == "Install is not ready (status: cancelled)"
            assert all(r["status"] == "failed" for r in started), started
        # After the cancellation has answered, no run starts.
        late = await client.post(f"/api/installs/{install_id}/run", json={"task": "go"}, headers=bearer(key))
        assert late.status == 409, await late.text()


async def test_repeated_reports_count_once_everywhere(make_client, aiohttp_server, store):
    client = await make_client(rate_limit_multiplier=None)
    paperclip = await start_paperclip(aiohttp_server)
    caller, key = await user_with_key(client)
    template = await publish_template(
        client, key, visibility="public", pricingModel="per_run", priceUsdCents=5
    )
    installer = await create_key(client, caller)
    # An orchA install: Paperclip's reporter posts each run, and retries, with the install token.
    install, token = await orch_a_install(client, installer, paperclip, template["id"])
    lead = install["deployedAgents"][0]["externalId"]

    def report(n: int) -> Any:
        body = ingest_body(lead, runId=f"r{n}", inputTokens=10, outputTokens=5)
        return client.post("/api/runs/ingest", json=body, headers=bearer(token))

    codes = await statuses(*await asyncio.gather(*(report(n % ROUNDS) for n in range(3 * ROUNDS))))
    assert set(codes) == {200}, codes
    response = await client.get(f"/api/runs?templateId={template['id']}&limit=500", headers=bearer(key))
    body = await ok(response)
    assert body["summary"]["totalRuns"] == ROUNDS
    assert body["summary"]["totalInputTokens"] == 10 * ROUNDS
    assert sorted(run["id"] for run in body["runs"]) == sorted({run["id"] for run in body["runs"]})
    assert len(body["runs"]) == ROUNDS
    billing = await ok(await client.get(f"/api/billing?templateId={template['id']}", headers=bearer(key)))
    assert billing["usage"]["totalRuns"] == ROUNDS and billing["usage"]["completedRuns"] == ROUNDS
    assert billing["billing"]["totalAmountCents"] == 5 * ROUNDS


async def test_a_deleted_draft_and_its_publish_have_one_winner(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    caller, key = await user_with_key(client)
    for _ in range(ROUNDS // 2):
        draft = await create_template(client, key, visibility="public")
        tid = draft["id"]
        installer = await create_key(client, caller)
        published, deleted, installed = await statuses(
            *await asyncio.gather(
                client.post(f"/api/templates/{tid}/publish", json={}, headers=bearer(key)),
                delete_template(client, key, tid),
                install_call(client, installer, tid),
            )
        )
        assert deleted in (204, 409) and published in (200, 404, 409) and installed in (201, 404, 409)
        exists = await store["templates"].count_documents({"_id": tid})
        assert not (deleted == 204 and (exists or installed == 201)), (published, deleted, installed)
        assert await active_installs(store, tid) == (1 if installed == 201 else 0)


async def test_heavy_routes_answer_503_when_busy_and_never_hold_up_the_light_ones(
    make_client, aiohttp_server, store
):
    client = await make_client(rate_limit_multiplier=None)
    paperclip = await start_paperclip(aiohttp_server)
    caller, key = await user_with_key(client)
    template = await publish_template(client, key, visibility="public")
    installer = await create_key(client, caller)
    # An orchA install, whose runs are reported (through its install token); a key scoped to it.
    install, token = await orch_a_install(client, installer, paperclip, template["id"])
    lead = install["deployedAgents"][0]["externalId"]
    scoped = await create_key(client, caller, installId=install["installId"])
    runs = f"/api/runs?templateId={template['id']}"
    gate = client.server.app[HEAVY_GATE]
    gate.wait_s = 0.05
    for _ in range(HEAVY_SLOTS):  # every slot taken, as by a burst of heavy queries
        await gate.slots.acquire()
    try:
        busy = await client.get(runs, headers=bearer(key))
        assert busy.status == 503 and busy.headers["Retry-After"] == "1"
        assert (await busy.json())["error"] == BUSY
        # Health, identity and run reports do not wait for a slot.
        assert (await client.get("/api/health")).status == 200
        assert (await client.get("/api/installs/whoami", headers=bearer(scoped))).status == 200
        body = ingest_body(lead, runId="x", inputTokens=1, outputTokens=1)
        reported = await client.post("/api/runs/ingest", json=body, headers=bearer(token))
        assert reported.status == 200, await reported.text()
    finally:
        for _ in range(HEAVY_SLOTS):
            gate.slots.release()
    assert (await client.get(runs, headers=bearer(key))).status == 200
    # A database too slow to answer within the limit: 503, and the slot is given back.
    gate.limit_s = 1e-6
    slow = await client.get(runs, headers=bearer(key))
    assert (
        slow.status == 503 and (await slow.json())["error"] == "The database is slow to answer; retry shortly"
    )
    gate.limit_s = 10.0
    ok_again = await client.get(runs, headers=bearer(key))
    assert ok_again.status == 200 and (await ok_again.json())["summary"]["totalRuns"] == 1
