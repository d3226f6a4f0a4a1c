"""Shared helpers for the template tests: valid definitions and bodies, and HTTP shortcuts.

A plain module (not a conftest): the test modules import what they use.
"""

from __future__ import annotations

import uuid
from typing import Any

from tests.support.accounts import bearer, create_key, signup

MODEL = "providerA:small"


def agent(key: str, **fields: Any) -> dict[str, Any]:
    """A valid agent with the given key; keyword arguments override or add fields."""
    value: dict[str, Any] = {
        "key": key,
        "name": f"Agent {key}",
        "title": "Helper",
        "role": "support",
        "capabilities": "answers questions",
        "model": MODEL,
        "prompt": f"You are {key}.",
    }
    value.update(fields)
    return value


def definition(*agents: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A valid team definition (one agent `lead` unless agents are given)."""
    value: dict[str, Any] = {
        "version": "v1",
        "description": "a test team",
        "agents": list(agents) if agents else [agent("lead")],
    }
    value.update(fields)
    return value


def unique_slug(prefix: str = "team") -> str:
    """A slug no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def template_body(**fields: Any) -> dict[str, Any]:
    """A valid POST /api/templates body; keyword arguments override fields."""
    value: dict[str, Any] = {
        "slug": unique_slug(),
        "name": "Support Team",
        "description": "answers support tickets",
        "ownerTeam": "platform",
        "visibility": "public",
        "definition": definition(),
    }
    value.update(fields)
    return value


async def user_with_key(client: Any, **signup_fields: Any) -> tuple[Any, str]:
    """Sign a user up and give them a personal key (both over HTTP)."""
    caller = await signup(client, **signup_fields)
    return caller, await create_key(client, caller)


async def create_template(client: Any, key: str, **fields: Any) -> dict[str, Any]:
    """POST /api/templates; asserts 201 and returns the created template."""
    response = await client.post("/api/templates", json=template_body(**fields), headers=bearer(key))
    assert response.status == 201, await response.text()
    return dict(await response.json())


async def publish(client: Any, key: str, template_id: str, **body: Any) -> Any:
    """POST /api/templates/:id/publish; returns the response."""
    return await client.post(f"/api/templates/{template_id}/publish", json=body, headers=bearer(key))


async def publish_ok(client: Any, key: str, template_id: str, **body: Any) -> dict[str, Any]:
    """Publish and assert 200; returns the body."""
    response = await publish(client, key, template_id, **body)
    assert response.status == 200, await response.text()
    return dict(await response.json())


async def publish_template(client: Any, key: str, **fields: Any) -> dict[str, Any]:
    """Create a template and publish it; returns the published template."""
    draft = await create_template(client, key, **fields)
    return await publish_ok(client, key, draft["id"])


async def new_version(client: Any, key: str, template_id: str) -> Any:
    """POST /api/templates/:id/new-version; returns the response."""
    return await client.post(f"/api/templates/{template_id}/new-version", headers=bearer(key))


async def new_version_ok(client: Any, key: str, template_id: str) -> dict[str, Any]:
    """Open a version draft and assert 201; returns the draft."""
    response = await new_version(client, key, template_id)
    assert response.status == 201, await response.text()
    return dict(await response.json())


async def patch(client: Any, key: str, template_id: str, **body: Any) -> Any:
    """PATCH /api/templates/:id; returns the response."""
    return await client.patch(f"/api/templates/{template_id}", json=body, headers=bearer(key))


async def patch_ok(client: Any, key: str, template_id: str, **body: Any) -> dict[str, Any]:
    """PATCH and assert 200; returns the body."""
    response = await patch(client, key, template_id, **body)
    assert response.status == 200, await response.text()
    return dict(await response.json())


async def release(
    client: Any, key: str, template_id: str, new_definition: dict[str, Any], change_log: str | None = None
) -> dict[str, Any]:
    """The whole version cycle: new-version, PATCH the draft, publish it; returns the parent."""
    draft = await new_version_ok(client, key, template_id)
    await patch_ok(client, key, draft["id"], definition=new_definition)
    body = {} if change_log is None else {"changeLog": change_log}
    return await publish_ok(client, key, draft["id"], **body)


async def get_template(client: Any, template_id: str, key: str | None = None) -> Any:
    """GET /api/templates/:id, with a key when given."""
    headers = bearer(key) if key else {}
    return await client.get(f"/api/templates/{template_id}", headers=headers)


async def listed_ids(client: Any, key: str | None = None, **query: Any) -> list[str]:
    """Ids on GET /api/templates (first page, limit 100)."""
    headers = bearer(key) if key else {}
    params = {"limit": "100", **{k: str(v) for k, v in query.items()}}
    response = await client.get("/api/templates", params=params, headers=headers)
    assert response.status == 200, await response.text()
    return [item["id"] for item in (await response.json())["templates"]]


async def versions(client: Any, template_id: str, key: str | None = None) -> list[dict[str, Any]]:
    """GET /api/templates/:id/versions; asserts 200 and returns the list."""
    headers = bearer(key) if key else {}
    response = await client.get(f"/api/templates/{template_id}/versions", headers=headers)
    assert response.status == 200, await response.text()
    return list((await response.json())["versions"])


async def seed_install(
    store: Any, install_id: str, template_id: str, deployed_by: str, email: str, status: str = "completed"
) -> None:
    """An install record HTTP cannot create yet (status `cancelled` is not active)."""
    await store.installs.insert_one(
        {
            "_id": install_id,
            "templateId": template_id,
            "status": status,
            "deployedBy": deployed_by,
            "deployerEmail": email,
        }
    )
