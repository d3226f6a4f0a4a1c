"""A fake of the Paperclip REST API (orchA) on 127.0.0.1, following the real server's recorded shapes.

Every answer is built from what `scripts/paperclip_record.py` recorded from the pinned Paperclip
(tests/fakes/paperclip_recorded/): the same status codes (201 on create, 200 `{ok: true}` on
delete, 403 for a company the key cannot reach, 401 with the real text for a bad key), the same
bodies (ids swapped in), and the real heartbeat, about 12 KB, that an `http` agent receives when
an issue is assigned to it or it is woken on demand. Agent keys authenticate issue write-backs
within a run (`X-Paperclip-Run-Id`), as on the real server; a run whose heartbeat got a non-2xx
answer is `failed`, as Paperclip's http adapter counts it.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

RECORDED = Path(__file__).parent / "paperclip_recorded"
BODY = web.RequestKey("body", object)
ACTOR = web.RequestKey("actor", str)
ROLES = {
    "ceo", "cto", "cmo", "cfo", "security", "pm", "engineer", "designer", "qa", "devops", "researcher",
    "general",
}


def recorded(name: str) -> dict[str, Any]:
    """One recorded exchange: {method, path, status, body} (heartbeats: {headers, body})."""
    return json.loads((RECORDED / f"{name}.json").read_text())


def answer(recording: str, **fields: Any) -> web.Response:
    """The recorded answer `recording`, with `fields` laid over its body."""
    exchange = recorded(recording)
    body = exchange["body"]
    if isinstance(body, dict):
        body = {**body, **fields}
    return web.json_response(body, status=exchange["status"])


@dataclass
class FakePaperclip:
    """In-memory companies, agents, issues and heartbeat runs.

    `fail_agent_create_at` makes the Nth agent create answer 500, `html_at` answers it with an
    HTML page, `deny_deletes` refuses deletes with 403; `deliver_to` replaces the origin of every
    `http` agent's URL (the test's service is not at SVC_PUBLIC_URL). Upgrades (docs/upgrades.md):
    `PATCH /api/agents/:id` with `replaceAdapterConfig` replaces the adapter configuration as the
    real server does (anything else merges), `PUT .../instructions-bundle/file` writes a file of
    the agent's bundle; `fail_agent_update_at` makes the Nth update answer 500.
    """

    api_key: str = "board-key-123"
    companies: dict[str, dict[str, Any]] = field(default_factory=dict)
    agents: dict[str, dict[str, Any]] = field(default_factory=dict)
    issues: dict[str, dict[str, Any]] = field(default_factory=dict)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    agent_keys: dict[str, str] = field(default_factory=dict)  # token -> agent id
    plugins: list[dict[str, Any]] = field(default_factory=list)
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    heartbeats: list[dict[str, Any]] = field(default_factory=list)
    fail_agent_create_at: int | None = None
    html_at: int | None = None
    deny_deletes: bool = False
    deliver_to: str | None = None
    key_expires_at: str | None = "2026-12-23T21:19:50.102Z"
    base_url: str = ""
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))
    _agent_creates: int = 0
    fail_agent_update_at: int | None = None
    _agent_updates: int = 0
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._auth])
        app.router.add_post("/api/companies", self.create_company)
        app.router.add_get("/api/companies/{id}", self.read_company)
        app.router.add_delete("/api/companies/{id}", self.delete_company)
        app.router.add_post("/api/companies/{id}/agents", self.create_agent)
        app.router.add_post("/api/companies/{id}/issues", self.create_issue)
        app.router.add_delete("/api/agents/{id}", self.delete_agent)
        app.router.add_post("/api/agents/{id}/pause", self.pause_agent)
        app.router.add_patch("/api/agents/{id}", self.update_agent)
        app.router.add_put("/api/agents/{id}/instructions-bundle/file", self.write_instructions)
        app.router.add_post("/api/agents/{id}/keys", self.create_agent_key)
        app.router.add_post("/api/agents/{id}/wakeup", self.wakeup)
        app.router.add_get("/api/issues/{id}", self.read_issue)
        app.router.add_patch("/api/issues/{id}", self.update_issue)
        app.router.add_get("/api/plugins", self.list_plugins)
        app.router.add_get("/api/cli-auth/me", self.whoami)
        app.router.add_get("/api/board-api-keys", self.board_keys)
        return app

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids)}"

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        body = await request.json() if request.can_read_body else None
        self.requests.append((request.method, request.path, body))
        credential = request.headers.get("Authorization", "")
        if credential == f"Bearer {self.api_key}":
            request[ACTOR] = "board"
        elif credential.removeprefix("Bearer ") in self.agent_keys:
            request[ACTOR] = f"agent:{self.agent_keys[credential.removeprefix('Bearer ')]}"
        else:
            return answer("wrong_key")
        request[BODY] = body
        return await handler(request)

    def _board(self, request: web.Request) -> web.Response | None:
        """Board-only routes answer an agent key with 403, as the real server does."""
        if request[ACTOR] != "board":
            return web.json_response({"error": "Board access required"}, status=403)
        return None

    # ---- companies -----------------------------------------------------------------------

    async def create_company(self, request: web.Request) -> web.Response:
        body = request[BODY]
        if not isinstance(body, dict) or not body.get("name"):
            return web.json_response({"error": "Validation error"}, status=400)
        company_id = self._new_id("co")
        prefix = "".join(c for c in body["name"].upper() if c.isalpha())[:3] or "CO"
        self.companies[company_id] = {"id": company_id, "name": body["name"], "issuePrefix": prefix}
        return answer("company_created", **self.companies[company_id])

    async def read_company(self, request: web.Request) -> web.Response:
        company = self.companies.get(request.match_info["id"])
        if company is None:
            return answer("unknown_company")
        return answer("company_read", **{"issuePrefix": "CO", **company})

    async def delete_company(self, request: web.Request) -> web.Response:
        if self.deny_deletes:
            return answer("unknown_company")
        if self.companies.pop(request.match_info["id"], None) is None:
            return answer("unknown_company")
        return answer("company_deleted")

    # ---- agents --------------------------------------------------------------------------

    async def create_agent(self, request: web.Request) -> web.Response:
        company_id = request.match_info["id"]
        body = request[BODY]
        if company_id not in self.companies:
            return answer("unknown_company")
        self._agent_creates += 1
        if self.html_at == self._agent_creates:
            return web.Response(text="<html>app</html>", content_type="text/html")
        if self.fail_agent_create_at == self._agent_creates:
            return web.json_response({"error": "Internal server error"}, status=500)
        problems = [k for k in ("name", "adapterType") if not body.get(k)]
        if problems or body.get("role", "general") not in ROLES:
            return web.json_response({"error": "Validation error", "details": problems}, status=400)
        bundle = body.get("instructionsBundle")
        if bundle is not None and not (isinstance(bundle.get("files"), dict) and bundle["files"]):
            return web.json_response({"error": "Validation error", "details": ["instructionsBundle"]}, 400)
        manager = body.get("reportsTo")
        if manager is not None and manager not in self.agents:
            return web.json_response({"error": "Reports-to agent not found"}, status=422)
        agent_id = self._new_id("ag")
        self.agents[agent_id] = {"id": agent_id, "companyId": company_id, "role": "general", **body}
        shown = {k: v for k, v in self.agents[agent_id].items() if k != "instructionsBundle"}
        return answer("agent_created", **shown)

    async def delete_agent(self, request: web.Request) -> web.Response:
        if refused := self._board(request):
            return refused
        if self.deny_deletes:
            return answer("unknown_company")
        if self.agents.pop(request.match_info["id"], None) is None:
            return answer("agent_not_found")
        return answer("agent_deleted")

    def _known_agent(self, request: web.Request) -> dict[str, Any] | web.Response:
        """The agent the path names, for a board caller; else Paperclip's refusal."""
        if refused := self._board(request):
            return refused
        agent = self.agents.get(request.match_info["id"])
        return answer("agent_not_found") if agent is None else agent

    async def pause_agent(self, request: web.Request) -> web.Response:
        """Paperclip's pause: the agent is no longer woken (the answer is the agent)."""
        agent = self._known_agent(request)
        if isinstance(agent, web.Response):
            return agent
        agent["status"] = "paused"
        return web.json_response(agent)

    async def update_agent(self, request: web.Request) -> web.Response:
        agent = self._known_agent(request)
        if isinstance(agent, web.Response):
            return agent
        self._agent_updates += 1
        if self.fail_agent_update_at == self._agent_updates:
            return web.json_response({"error": "Internal server error"}, status=500)
        body = dict(request[BODY] or {})
        if "permissions" in body:
            return web.json_response({"error": "Use /api/agents/:id/permissions for permission changes"}, 422)
        replace = body.pop("replaceAdapterConfig", False) is True
        if body.get("role", agent.get("role", "general")) not in ROLES:
            return web.json_response({"error": "Validation error", "details": ["role"]}, status=400)
        manager = body.get("reportsTo")
        if manager is not None and manager not in self.agents:
            return web.json_response({"error": "Reports-to agent not found"}, status=422)
        if "adapterConfig" in body and not replace:
            body["adapterConfig"] = {**(agent.get("adapterConfig") or {}), **body["adapterConfig"]}
        agent.update(body)
        shown = {k: v for k, v in agent.items() if k != "instructionsBundle"}
        return web.json_response({**recorded("agent_created")["body"], **shown}, status=200)

    async def write_instructions(self, request: web.Request) -> web.Response:
        agent = self._known_agent(request)
        if isinstance(agent, web.Response):
            return agent
        body = request[BODY] or {}
        if not isinstance(body.get("path"), str) or not isinstance(body.get("content"), str):
            return web.json_response({"error": "Validation error"}, status=400)
        files = agent.setdefault("instructionsBundle", {"files": {}})["files"]
        files[body["path"]] = body["content"]
        return web.json_response({"path": body["path"], "size": len(body["content"].encode())})

    async def create_agent_key(self, request: web.Request) -> web.Response:
        if refused := self._board(request):
            return refused
        agent_id = request.match_info["id"]
        if agent_id not in self.agents:
            return answer("agent_not_found")
        token = f"pcp_{uuid.uuid4().hex}"
        self.agent_keys[token] = agent_id
        name = (request[BODY] or {}).get("name", "default")
        return answer("agent_key_created", id=self._new_id("key"), name=name, token=token)

    async def list_plugins(self, request: web.Request) -> web.Response:
        return web.json_response(self.plugins)

    async def whoami(self, request: web.Request) -> web.Response:
        return answer("whoami", keyId="board-key-id")

    async def board_keys(self, request: web.Request) -> web.Response:
        listed = recorded("board_keys_listed")["body"]
        return web.json_response([{**listed[0], "id": "board-key-id", "expiresAt": self.key_expires_at}])

    # ---- issues and heartbeats -------------------------------------------------------------

    async def create_issue(self, request: web.Request) -> web.Response:
        company = self.companies.get(request.match_info["id"])
        if company is None:
            return answer("unknown_company")
        body = request[BODY]
        number = sum(1 for i in self.issues.values() if i["companyId"] == company["id"]) + 1
        issue_id = self._new_id("is")
        self.issues[issue_id] = {
            "id": issue_id,
            "companyId": company["id"],
            "identifier": f"{company.get('issuePrefix', 'CO')}-{number}",
            "title": body["title"],
            "description": body.get("description"),
            "status": body.get("status", "backlog"),
            "assigneeAgentId": body.get("assigneeAgentId"),
            "comments": [],
        }
        if body.get("assigneeAgentId") in self.agents:
            self.issues[issue_id]["status"] = "in_progress"
            self._spawn(self.deliver(body["assigneeAgentId"], issue_id, "issue_assigned"))
        return answer("issue_created", **{k: v for k, v in self.issues[issue_id].items() if k != "comments"})

    async def read_issue(self, request: web.Request) -> web.Response:
        issue = self.issues.get(request.match_info["id"])
        if issue is None:
            return web.json_response({"error": "Issue not found"}, status=404)
        return answer("issue_read", **{k: v for k, v in issue.items() if k != "comments"})

    async def update_issue(self, request: web.Request) -> web.Response:
        issue = self.issues.get(request.match_info["id"])
        if issue is None:
            return web.json_response({"error": "Issue not found"}, status=404)
        actor = request[ACTOR]
        if actor.startswith("agent:"):
            run = self.runs.get(request.headers.get("X-Paperclip-Run-Id", ""))
            if run is None or run["agentId"] != actor[6:] or run["status"] != "running":
                return web.json_response({"error": "Agent run id required for this mutation"}, status=401)
        body = request[BODY] or {}
        if body.get("comment"):
            issue["comments"].append(body["comment"])
        if body.get("status"):
            issue["status"] = body["status"]
        shown = {k: v for k, v in issue.items() if k != "comments"}
        return answer("issue_written_back", **shown, comment={"body": body.get("comment")})

    async def wakeup(self, request: web.Request) -> web.Response:
        agent_id = request.match_info["id"]
        if agent_id not in self.agents:
            return answer("agent_not_found")
        run_id = str(uuid.uuid4())
        self._spawn(self.deliver(agent_id, None, "manual", run_id=run_id))
        return answer("wakeup", id=run_id, agentId=agent_id, status="queued")

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def heartbeat(self, agent_id: str, issue_id: str | None, run_id: str) -> dict[str, Any]:
        """The recorded heartbeat for this agent, run and issue (the recorded ids swapped out)."""
        template = recorded("heartbeat_issue_assigned" if issue_id else "heartbeat_on_demand")["body"]
        agent = self.agents[agent_id]
        text = json.dumps(template)
        text = text.replace(template["runId"], run_id).replace(template["agentId"], agent_id)
        old_issue = template["context"].get("paperclipIssue") or {}
        issue = self.issues.get(issue_id or "")
        if issue and old_issue:
            for old, new in (
                (old_issue["id"], issue["id"]),
                (old_issue["identifier"], issue["identifier"]),
                (json.dumps(old_issue["title"])[1:-1], json.dumps(issue["title"])[1:-1]),
                (json.dumps(old_issue["description"])[1:-1], json.dumps(issue["description"] or "")[1:-1]),
            ):
                text = text.replace(old, new)
        body = json.loads(text)
        body.pop("installId", None)
        body.pop("agentKey", None)
        body = {**copy.deepcopy(agent["adapterConfig"].get("payloadTemplate") or {}), **body}
        body["paperclipRuntimeTools"]["bearerToken"] = f"runtime-{uuid.uuid4().hex}"
        return body

    async def deliver(
        self, agent_id: str, issue_id: str | None, reason: str, run_id: str | None = None
    ) -> None:
        """One heartbeat run: POST the heartbeat to the agent's URL; the run is failed unless 2xx."""
        run_id = run_id or str(uuid.uuid4())
        agent = self.agents[agent_id]
        self.runs[run_id] = {"id": run_id, "agentId": agent_id, "issueId": issue_id, "status": "running"}
        config = agent["adapterConfig"]
        url = config["url"]
        if self.deliver_to:
            url = self.deliver_to.rstrip("/") + "/" + url.split("/", 3)[3]
        body = self.heartbeat(agent_id, issue_id, run_id)
        try:
            async with aiohttp.ClientSession() as session:
                async with session.post(url, json=body, headers=config.get("headers") or {}) as response:
                    status, text = response.status, await response.text()
        except aiohttp.ClientError as exc:
            status, text = 0, type(exc).__name__
        self.heartbeats.append({"runId": run_id, "agentId": agent_id, "status": status, "answer": text,
                                "body": body})
        self.runs[run_id]["status"] = "succeeded" if 200 <= status < 300 else "failed"
        issue = self.issues.get(issue_id or "")
        if issue is not None and issue["status"] == "in_progress":
            # What Paperclip does with a run that left no disposition (or failed).
            issue["status"] = "blocked"

    async def settled(self) -> None:
        """Wait for every heartbeat in flight."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
