"""A fake Relevance AI agents API (the `orchB` upstream) for driver tests.

`create_app(FakeOrchB())` serves, under `/latest`:

- `POST /agents/upsert` {name, system_prompt, model, metadata?, agent_id?} -> {agent_id}
- `POST /agents/{agent_id}/delete` -> {} (404 when the agent does not exist)
- `GET /agents/conversations/list?filters=&sort=&page_size=&page=` -> {results: [{metadata}]}

Every request is recorded; a wrong `Authorization` (`<projectId>:<apiKey>`) is 401.
`fail_upsert_at=N` answers the Nth upsert with 500; `deny_deletes` answers deletes with 403.
Error bodies echo the Authorization header they received, as a careless upstream might,
so tests can check the driver never repeats it.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

PREFIX = "/latest"


@dataclass
class Recorded:
    """One request as the fake received it."""

    method: str
    path: str
    query: dict[str, str]
    authorization: str | None
    body: Any


@dataclass
class FakeOrchB:
    """The fake's state: agents, conversations, recorded requests and failure switches."""

    project_id: str = "proj-123"
    api_key: str = "rk-super-secret-key"
    fail_upsert_at: int | None = None
    deny_deletes: bool = False
    agents: dict[str, dict[str, Any]] = field(default_factory=dict)
    conversations: list[dict[str, Any]] = field(default_factory=list)
    requests: list[Recorded] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    upserts: int = 0
    # `hold_upsert_at=N` keeps the Nth upsert waiting (after `holding` is set) until `release` is set.
    hold_upsert_at: int | None = None
    holding: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def authorization(self) -> str:
        """The header value the fake accepts."""
        return f"{self.project_id}:{self.api_key}"

    def add_conversation(
        self, agent_id: str, state: str, updated: datetime, conversation_id: str | None = None
    ) -> str:
        """Seed one conversation (task) of an agent; returns its id."""
        conversation_id = conversation_id or f"conv-{uuid.uuid4().hex[:12]}"
        stamp = updated.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{updated.microsecond // 1000:03d}Z"
        self.conversations.append(
            {
                "knowledge_set": conversation_id,
                "insert_date": stamp,
                "update_date": stamp,
                "conversation": {
                    "agent_id": agent_id,
                    "state": state,
                    "title": "task",
                    "created_by_user_id": "user-1",
                },
            }
        )
        return conversation_id

    def paths(self, method: str | None = None) -> list[str]:
        """The paths requested so far (optionally of one method), without the prefix."""
        return [r.path.removeprefix(PREFIX) for r in self.requests if method in (None, r.method)]


FAKE_KEY = web.AppKey("fake_orch_b", FakeOrchB)
BODY_KEY = web.RequestKey("fake_orch_b_body", object)


def _error(status: int, message: str, request: web.Request) -> web.Response:
    """An error body in the upstream's style (it echoes the credential it got)."""
    return web.json_response(
        {"message": message, "received_authorization": request.headers.get("Authorization")}, status=status
    )


@web.middleware
async def _record_and_authorise(request: web.Request, handler: Any) -> web.StreamResponse:
    """Record the request, then refuse it when the Authorization header is wrong."""
    fake = request.app[FAKE_KEY]
    body: Any = None
    if request.can_read_body:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
    fake.requests.append(
        Recorded(
            request.method, request.path, dict(request.query), request.headers.get("Authorization"), body
        )
    )
    request[BODY_KEY] = body
    if request.headers.get("Authorization") != fake.authorization:
        return _error(401, "Unauthorized", request)
    return await handler(request)


async def upsert(request: web.Request) -> web.Response:
    """Create (or update, with agent_id) an agent."""
    fake = request.app[FAKE_KEY]
    body = request[BODY_KEY]
    if not isinstance(body, dict):
        return _error(400, "body must be a JSON object", request)
    for key in ("name", "system_prompt", "model"):
        if not isinstance(body.get(key), str) or not body[key]:
            return _error(400, f"{key} is required", request)
    if "metadata" in body and not isinstance(body["metadata"], dict):
        return _error(400, "metadata must be an object", request)
    fake.upserts += 1
    if fake.hold_upsert_at is not None and fake.upserts == fake.hold_upsert_at:
        fake.holding.set()
        await fake.release.wait()
    if fake.fail_upsert_at is not None and fake.upserts == fake.fail_upsert_at:
        return _error(500, "internal error while saving the agent", request)
    agent_id = body.get("agent_id") or str(uuid.uuid4())
    if agent_id not in fake.agents:
        fake.created.append(agent_id)
    fake.agents[agent_id] = {**body, "agent_id": agent_id}
    return web.json_response({"agent_id": agent_id})


async def delete(request: web.Request) -> web.Response:
    """Delete an agent."""
    fake = request.app[FAKE_KEY]
    if fake.deny_deletes:
        return _error(403, "This API key may not delete agents", request)
    agent_id = request.match_info["agent_id"]
    if fake.agents.pop(agent_id, None) is None:
        return _error(404, f"agent {agent_id} not found", request)
    return web.json_response({})


def _matches(conversation: dict[str, Any], rule: dict[str, Any]) -> bool:
    """Whether a conversation passes one exact_match filter rule."""
    value: Any = {"conversation": conversation["conversation"], **conversation}
    for part in rule["field"].split("."):
        value = value.get(part) if isinstance(value, dict) else None
    wanted = rule["condition_value"]
    wanted = wanted if isinstance(wanted, list) else [wanted]
    hit = value in wanted
    return hit if rule.get("condition", "==") == "==" else not hit


async def conversations(request: web.Request) -> web.Response:
    """List conversations, filtered, sorted and paged as the query asks."""
    fake = request.app[FAKE_KEY]
    try:
        filters = json.loads(request.query.get("filters", "[]"))
        sort = json.loads(request.query.get("sort", "[]"))
        page_size = int(request.query.get("page_size", "20"))
        page = int(request.query.get("page", "1"))
        assert isinstance(filters, list) and isinstance(sort, list) and page_size > 0 and page > 0
        for rule in filters:
            assert rule["filter_type"] == "exact_match" and "field" in rule and "condition_value" in rule
    except (ValueError, AssertionError, KeyError, TypeError):
        return _error(400, "invalid filters, sort or paging", request)
    items = [c for c in fake.conversations if all(_matches(c, rule) for rule in filters)]
    for order in reversed(sort):
        ((key, direction),) = order.items()
        items.sort(key=lambda c, k=key: c[k], reverse=direction == "desc")
    start = (page - 1) * page_size
    return web.json_response({"results": [{"metadata": c} for c in items[start : start + page_size]]})


def create_app(fake: FakeOrchB) -> web.Application:
    """The fake upstream as an aiohttp application."""
    app = web.Application(middlewares=[_record_and_authorise])
    app[FAKE_KEY] = fake
    app.router.add_post(f"{PREFIX}/agents/upsert", upsert)
    app.router.add_post(PREFIX + "/agents/{agent_id}/delete", delete)
    app.router.add_get(f"{PREFIX}/agents/conversations/list", conversations)
    return app
