"""A fake of the Paperclip REST API (orchA) on 127.0.0.1, checking auth and request shapes."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

BODY = web.RequestKey("body", object)
ROLES = {"ceo", "cto", "cmo", "cfo", "pm", "engineer", "designer", "qa", "devops", "researcher", "general"}


@dataclass
class FakePaperclip:
    """In-memory companies and agents; `fail_agent_create_at` makes the Nth agent create answer 500."""

    api_key: str = "board-key-123"
    companies: dict[str, dict[str, Any]] = field(default_factory=dict)
    agents: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    fail_agent_create_at: int | None = None
    html_at: int | None = None  # answer the Nth agent create with 200 and an HTML page
    deny_deletes: bool = False
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))
    _agent_creates: int = 0

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._auth])
        app.router.add_post("/api/companies", self.create_company)
        app.router.add_delete("/api/companies/{id}", self.delete_company)
        app.router.add_post("/api/companies/{id}/agents", self.create_agent)
        app.router.add_delete("/api/agents/{id}", self.delete_agent)
        return app

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        body = await request.json() if request.can_read_body else None
        self.requests.append((request.method, request.path, body))
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return web.json_response({"error": "unauthorized"}, status=401)
        request[BODY] = body
        return await handler(request)

    async def create_company(self, request: web.Request) -> web.Response:
        body = request[BODY]
        if not isinstance(body, dict) or not body.get("name"):
            return web.json_response({"error": "name required"}, status=400)
        company_id = f"co-{next(self._ids)}"
        self.companies[company_id] = {"id": company_id, "name": body["name"]}
        return web.json_response(self.companies[company_id], status=201)

    async def delete_company(self, request: web.Request) -> web.Response:
        self.companies.pop(request.match_info["id"], None)
        return web.Response(status=204)

    async def create_agent(self, request: web.Request) -> web.Response:
        company_id = request.match_info["id"]
        body = request[BODY]
        if company_id not in self.companies:
            return web.json_response({"error": "company not found"}, status=404)
        self._agent_creates += 1
        if self.html_at == self._agent_creates:
            return web.Response(text="<html>app</html>", content_type="text/html")
        if self.fail_agent_create_at == self._agent_creates:
            return web.json_response({"error": "boom"}, status=500)
        problems = [k for k in ("name", "role", "adapterType", "adapterConfig") if not body.get(k)]
        if problems or body["role"] not in ROLES:
            return web.json_response({"error": f"bad agent: {problems or body['role']}"}, status=400)
        manager = body.get("reportsTo")
        if manager is not None and manager not in self.agents:
            return web.json_response({"error": "reportsTo must name an existing agent"}, status=400)
        agent_id = f"ag-{next(self._ids)}"
        self.agents[agent_id] = {"id": agent_id, "companyId": company_id, **body}
        return web.json_response({"id": agent_id}, status=201)

    async def delete_agent(self, request: web.Request) -> web.Response:
        if self.deny_deletes:
            return web.json_response({"error": "forbidden"}, status=403)
        if self.agents.pop(request.match_info["id"], None) is None:
            return web.json_response({"error": "not found"}, status=404)
        return web.Response(status=204)
