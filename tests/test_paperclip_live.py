"""orchA against the real Paperclip (pinned in scripts/paperclip.py), the whole loop through our API.

Paperclip (Node 24 and the npm package, cached in ~/.cache/svc/paperclip) is onboarded in local trusted
mode with telemetry off, its private-endpoint allowlist naming our test server, and the reporting
plugin installed through its API. Then, through the service's HTTP API with a fake model provider:
install a team (two `http` agents and one local-adapter agent) into a new company; assign an issue
so Paperclip wakes an agent; the agent's prompt carries the issue; the outcome is written back so
the issue ends `done` without a second wake; a failing run ends failed in Paperclip; the plugin
reports the local agent's run, counted once by the run list and billing; uninstall removes the
agents and the company. A second test moves an orchA install up and back: the plan, the upgrade
(an agent updated in place with its new instructions, one created, one removed), a heartbeat
running the new version's prompt, and the rollback. Both share one Paperclip (its install and
start are most of this file's time); it and its Postgres are stopped at the end.

When Paperclip cannot run here (no npm, no Node binary from the registry, not linux-x64) the test
fails under CI and is skipped elsewhere, with one line saying why.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import aiohttp
import pytest

from api.app import create_app
from scripts.paperclip import Paperclip, PaperclipUnavailable, free_port, install_reporter
from tests.support import waiting
from tests.support.accounts import bearer, create_key, signup
from tests.support.runtime import provider_settings, start_llm
from tests.support.templates import publish_template
from tests.support.upgrades import LOCKED, move_ok, plan_of, publish_next, versions

DEADLINE_S = 180.0
TEAM = {
    "agents": [
        {
            "key": "lead",
            "name": "Lead",
            "role": "manager",
            "model": "providerA:small",
            "prompt": "You lead the launch team.",
            "adapterType": "http",
        },
        {
            "key": "writer",
            "name": "Writer",
            "role": "developer",
            "model": "providerA:small",
            "prompt": "You write launch notes.",
            "adapterType": "http",
            "reportsTo": "lead",
        },
        {
            "key": "coder",
            "name": "Coder",
            "role": "engineer",
            "model": "providerA:small",
            "prompt": "You are the coder of the launch team.",
            "reportsTo": "lead",
        },
    ]
}


@pytest.fixture(scope="module")
def svc_port() -> int:
    """Our service's port, fixed before Paperclip starts so its allowlist can name it."""
    return free_port()


@pytest.fixture(scope="module")
def paperclip(svc_port: int) -> Iterator[Paperclip]:
    """A running, onboarded Paperclip with the reporting plugin; stopped (with Postgres) after."""
    server = Paperclip(allow_origins=[f"http://127.0.0.1:{svc_port}"])
    try:
        server.start()
    except PaperclipUnavailable as exc:
        server.stop()
        reason = f"live Paperclip test cannot run: {exc}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        yield server
    finally:
        pid = server.process.pid if server.process else None
        server.stop()
        if pid is not None:
            with pytest.raises(ProcessLookupError):
                os.killpg(pid, 0)  # nothing of Paperclip's process group is left


async def eventually(check: Callable[[], Awaitable[Any]], what: str) -> Any:
    """Poll `check` until it returns something truthy (with a deadline, never a fixed wait)."""
    return await waiting.eventually(check, what, timeout_s=DEADLINE_S, interval_s=0.5)


class Upstream:
    """Calls to Paperclip's REST API as its board user."""

    def __init__(self, base: str, key: str) -> None:
        self.base, self.key = base, key

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        async with aiohttp.ClientSession() as session:
            async with session.request(
                method, f"{self.base}{path}", json=body, headers={"Authorization": f"Bearer {self.key}"}
            ) as response:
                data = await response.json(content_type=None) if await response.read() else None
                return response.status, data

    async def ok(self, method: str, path: str, body: Any = None) -> Any:
        status, data = await self.call(method, path, body)
        assert status < 300, f"{method} {path}: {status} {data}"
        return data


async def test_the_whole_loop_against_the_real_paperclip(
    paperclip: Paperclip, svc_port: int, aiohttp_client, aiohttp_server, make_settings, store, ray_session
):
    llm, llm_url = await start_llm(aiohttp_server)
    settings = make_settings(
        rate_limit_multiplier=None, providers=provider_settings(llm_url), public_url=f"http://127.0.0.1:{svc_port}"
    )
    client = await aiohttp_client(create_app(settings), server_kwargs={"port": svc_port})
    board_key = await asyncio.to_thread(paperclip.board_key, "svc-live-test")
    upstream = Upstream(paperclip.base_url, board_key)

    # The operator installs the reporting plugin into Paperclip (docs/platforms/orchA.md).
    plugin_dir = await asyncio.to_thread(install_reporter)
    await upstream.ok("POST", "/api/plugins/install", {"packageName": str(plugin_dir), "isLocalPath": True})

    # Bad input first: a wrong key and a company the key cannot reach are 502s naming the upstream.
    caller = await signup(client)
    key = await create_key(client, caller)
    template = await publish_template(client, key, visibility="public", definition=TEAM)
    credentials = {"orchABaseUrl": paperclip.base_url, "orchAApiKey": board_key}
    body = {"templateId": template["id"], "platform": "orchA", "credentials": credentials}
    wrong = await client.post(
        "/api/installs",
        json={**body, "companyName": "X", "credentials": {**credentials, "orchAApiKey": "pcp_board_wrong"}},
        headers=bearer(key),
    )
    assert wrong.status == 502 and (await wrong.json())["upstreamStatus"] == 401
    nobody = "00000000-0000-4000-8000-000000000000"
    unknown = await client.post("/api/installs", json={**body, "companyId": nobody}, headers=bearer(key))
    assert unknown.status == 502 and (await unknown.json())["upstreamStatus"] == 403

    # Install into a new company.
    body["companyName"] = "Launch Co"
    response = await client.post("/api/installs", json=body, headers=bearer(key))
    assert response.status == 201, await response.text()
    install = await response.json()
    company_id = install["companyId"]
    agents = {a["key"]: a["externalId"] for a in install["deployedAgents"]}
    assert not any("svc.paperclip-reporter" in w for w in install.get("warnings", [])), "the plugin is ready"
    company = await upstream.ok("GET", f"/api/companies/{company_id}")
    prefix = company["issuePrefix"]
    assert install["platformData"]["dashboardUrl"] == f"{paperclip.base_url}/{prefix}/dashboard"
    writer = await upstream.ok("GET", f"/api/agents/{agents['writer']}")
    assert writer["adapterType"] == "http" and writer["reportsTo"] == agents["lead"]
    assert writer["adapterConfig"]["url"] == f"http://127.0.0.1:{svc_port}/api/runtime/webhook"
    coder = await upstream.ok("GET", f"/api/agents/{agents['coder']}")
    assert coder["adapterType"] == "claude_local" and coder["role"] == "engineer"
    bundle = f"/api/agents/{agents['coder']}/instructions-bundle/file?path=AGENTS.md"
    prompt = await upstream.ok("GET", bundle)
    assert "You are the coder of the launch team." in str(prompt), "the prompt reached Paperclip's bundle"

    # Assign an issue: Paperclip wakes the writer, our runtime runs it and writes the outcome back.
    llm.script(text="Launch note: the product ships on Monday.", input_tokens=30, output_tokens=8)
    issue = await upstream.ok(
        "POST",
        f"/api/companies/{company_id}/issues",
        {
            "title": "Write the launch note",
            "description": "Two sentences about Monday's launch.",
            "assigneeAgentId": agents["writer"],
            "status": "todo",
        },
    )

    async def issue_status(issue_id: str) -> str:
        return str((await upstream.ok("GET", f"/api/issues/{issue_id}"))["status"])

    await eventually(lambda: _is(issue_status(issue["id"]), "done"), "the issue to be done")
    sent = llm.requests[0].body["messages"][0]["content"]
    assert "Write the launch note" in sent and "Two sentences about Monday's launch." in sent

    # Paperclip applies the PATCH's status before it stores the PATCH's comment.
    async def commented() -> bool:
        comments = await upstream.ok("GET", f"/api/issues/{issue['id']}/comments")
        return "Launch note: the product ships on Monday." in str(comments)

    await eventually(commented, "the response as the issue's comment")
    done_run = await store["runs"].find_one(
        {"installId": install["installId"], "status": "completed", "platformAgentId": agents["writer"]}
    )
    assert done_run is not None and done_run["agentKey"] == "writer"

    async def run_status(run_id: str) -> str:
        return str((await upstream.ok("GET", f"/api/heartbeat-runs/{run_id}"))["status"])

    # The issue is done within the run; the run itself ends when our answer reaches Paperclip.
    await eventually(lambda: _is(run_status(done_run["platformRunId"]), "succeeded"), "the run to succeed")

    # A failing run is failed in Paperclip (the runtime answers 502).
    llm.fail_next(20, status=400, message="model refused")
    failing = await upstream.ok(
        "POST",
        f"/api/companies/{company_id}/issues",
        {
            "title": "Doomed",
            "description": "This run fails.",
            "assigneeAgentId": agents["writer"],
            "status": "todo",
        },
    )

    async def failed_upstream() -> Any:
        ours = await store["runs"].find_one({"installId": install["installId"], "status": "failed",
                                             "platformAgentId": agents["writer"]})
        if ours is None:
            return None
        status, theirs = await upstream.call("GET", f"/api/heartbeat-runs/{ours['platformRunId']}")
        return theirs if status == 200 and theirs["status"] in ("failed", "timed_out") else None

    theirs = await eventually(failed_upstream, "Paperclip to fail the run")
    assert "502" in str(theirs.get("error")), theirs.get("error")
    llm.failures.clear()
    assert await issue_status(failing["id"]) != "done"

    # The local agent's run (Paperclip runs it; without a model CLI here it fails) is reported by
    # the plugin to our ingest endpoint, once.
    wake = await upstream.ok("POST", f"/api/agents/{agents['coder']}/wakeup", {"source": "on_demand"})

    async def reported() -> Any:
        return await store["runs"].find_one({"installId": install["installId"], "runId": wake["id"]})

    report = await eventually(reported, "the plugin's run report")
    assert report["source"] == "ingest" and report["platformAgentId"] == agents["coder"]
    assert await store["runs"].count_documents({"installId": install["installId"], "runId": wake["id"]}) == 1
    total = await store["runs"].count_documents({"installId": install["installId"]})
    listed = await (await client.get(f"/api/runs?templateId={template['id']}", headers=bearer(key))).json()
    assert listed["summary"]["totalRuns"] == total
    billed = await client.get(
        f"/api/billing?templateId={template['id']}&installId={install['installId']}", headers=bearer(key)
    )
    assert (await billed.json())["usage"]["totalRuns"] == total

    # Uninstall: a plain DELETE cancels; removeUpstream afterwards removes agents and company. The
    # local agent's failed run and the doomed issue's wake-ups are Paperclip's to finish first:
    # an agent whose run Paperclip is still writing may refuse its delete (a warning, not a count).
    async def nothing_live() -> bool:
        return not await upstream.ok("GET", f"/api/companies/{company_id}/live-runs")

    await eventually(nothing_live, "Paperclip's runs of the company to end")
    response = await client.delete(f"/api/installs/{install['installId']}", headers=bearer(key))
    assert response.status == 200 and (await response.json())["deletedAgents"] == 0
    response = await client.delete(
        f"/api/installs/{install['installId']}?removeUpstream=true", headers=bearer(key)
    )
    assert response.status == 200, await response.text()
    removed = await response.json()
    assert removed["deletedAgents"] == 3, json.dumps(removed)  # the whole answer, warnings included
    for agent_id in agents.values():
        assert (await upstream.call("GET", f"/api/agents/{agent_id}"))[0] == 404
    assert (await upstream.call("GET", f"/api/companies/{company_id}"))[0] in (403, 404)


async def _is(value: Awaitable[str], expected: str) -> bool:
    return await value == expected


def move_team(version: str, *, with_old: bool, with_editor: bool) -> dict[str, Any]:
    """lead (http) and coder (local adapter) in both versions; `old` only in v1, `editor` in v2."""
    agents: list[dict[str, Any]] = [
        {
            "key": "lead",
            "name": "Lead",
            "role": "manager",
            "model": "providerA:small",
            "prompt": f"You lead the launch team ({version}).",
            "adapterType": "http",
        },
        {
            "key": "coder",
            "name": "Coder",
            "role": "engineer",
            "model": "providerA:small",
            "prompt": f"You are the coder ({version}).",
            "reportsTo": "lead",
        },
    ]
    if with_old:
        agents.append(
            {"key": "old", "name": "Old", "model": "providerA:small", "prompt": "Old.", "reportsTo": "lead"}
        )
    if with_editor:
        agents.append(
            {
                "key": "editor",
                "name": "Editor",
                "model": "providerA:small",
                "prompt": "Edit.",
                "reportsTo": "lead",
                "adapterType": "http",
                "accessPolicy": LOCKED,
            }
        )
    return {"agents": agents}


async def test_an_orch_a_install_moves_up_and_back_on_the_real_paperclip(
    paperclip: Paperclip,
    svc_port: int,
    aiohttp_client,
    aiohttp_server,
    make_settings,
    store,
    ray_session,
):
    llm, llm_url = await start_llm(aiohttp_server)
    settings = make_settings(
        rate_limit_multiplier=None,
        providers=provider_settings(llm_url),
        public_url=f"http://127.0.0.1:{svc_port}",
    )
    client = await aiohttp_client(create_app(settings), server_kwargs={"port": svc_port})
    board_key = await asyncio.to_thread(paperclip.board_key, "svc-upgrade-test")
    upstream = Upstream(paperclip.base_url, board_key)
    caller = await signup(client)
    key = await create_key(client, caller)
    headers = bearer(key)
    first = move_team("v1", with_old=True, with_editor=False)
    template = await publish_template(client, key, definition=first)
    credentials = {"orchABaseUrl": paperclip.base_url, "orchAApiKey": board_key}
    body = {
        "templateId": template["id"],
        "platform": "orchA",
        "credentials": credentials,
        "companyName": "Move Co",
    }
    response = await client.post("/api/installs", json=body, headers=headers)
    assert response.status == 201, await response.text()
    install = await response.json()
    install_id, company_id = install["installId"], install["companyId"]
    before = {a["key"]: a["externalId"] for a in install["deployedAgents"]}

    second = move_team("v2", with_old=False, with_editor=True)
    await publish_next(client, key, template["id"], second, "an editor")
    plan = await plan_of(client, headers, install_id)
    assert plan["ready"] is True, plan["problems"]
    assert {c["key"]: c["action"] for c in plan["platform"]["changes"]} == {
        "lead": "update",
        "coder": "update",
        "editor": "create",
        "old": "remove",
    }

    moved = await move_ok(client, headers, install_id)
    assert moved["warnings"] == [], moved["warnings"]
    after = {a["key"]: a["externalId"] for a in moved["deployedAgents"]}
    assert (after["lead"], after["coder"]) == (before["lead"], before["coder"])
    bundle = await upstream.ok("GET", f"/api/agents/{after['coder']}/instructions-bundle/file?path=AGENTS.md")
    assert "You are the coder (v2)." in str(bundle), "the new prompt reached Paperclip's bundle"
    coder = await upstream.ok("GET", f"/api/agents/{after['coder']}")
    assert coder["adapterType"] == "claude_local" and coder["reportsTo"] == after["lead"]
    editor = await upstream.ok("GET", f"/api/agents/{after['editor']}")
    assert editor["adapterType"] == "http" and editor["reportsTo"] == after["lead"]
    assert (await upstream.call("GET", f"/api/agents/{before['old']}"))[0] == 404

    # A heartbeat after the move runs the new version's prompt for the http lead.
    llm.script(text="Planned.")
    issue = await upstream.ok(
        "POST",
        f"/api/companies/{company_id}/issues",
        {
            "title": "Plan the launch",
            "description": "Briefly.",
            "assigneeAgentId": after["lead"],
            "status": "todo",
        },
    )

    async def issue_done() -> bool:
        return (await upstream.ok("GET", f"/api/issues/{issue['id']}"))["status"] == "done"

    await eventually(issue_done, "the issue to be done")
    assert "You lead the launch team (v2)." in llm.requests[-1].body["system"]

    # Back under the same rules: `old` has no policy, so its reach is accepted again.
    back_plan = await plan_of(client, headers, install_id, "rollback")
    accept = back_plan["permissions"]["acceptance"]
    back = await move_ok(client, headers, install_id, "rollback", acceptPermissions=accept)
    assert back["toVersion"] == 1
    restored = {a["key"]: a["externalId"] for a in back["deployedAgents"]}
    assert (await upstream.call("GET", f"/api/agents/{after['editor']}"))[0] == 404
    assert (await upstream.ok("GET", f"/api/agents/{restored['old']}"))["name"] == "Old"
    bundle = await upstream.ok(
        "GET", f"/api/agents/{restored['coder']}/instructions-bundle/file?path=AGENTS.md"
    )
    assert "You are the coder (v1)." in str(bundle)
    assert (await versions(client, headers, install_id))["currentVersion"] == 1

    response = await client.delete(f"/api/installs/{install_id}?removeUpstream=true", headers=headers)
    assert response.status == 200, await response.text()
    for agent_id in restored.values():
        assert (await upstream.call("GET", f"/api/agents/{agent_id}"))[0] == 404
