"""Seeding what a browser flow starts from, over the live service's HTTP API (tests/browser/)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from tests.support.runtime import member as agent  # a valid agent on the fake providerA

if TYPE_CHECKING:
    from tests.browser.conftest import Api

PASSWORD = "correct horse battery"
__all__ = ["PASSWORD", "agent", "email", "seeded_install"]


def email() -> str:
    """An address no other test uses."""
    return f"b-{uuid.uuid4().hex[:10]}@example.com"


def seeded_install(api: Api, agents: list[dict[str, Any]], **definition: Any) -> tuple[str, str, str]:
    """A user with a published public template installed on svc: (session, key, install id)."""
    session = api.signup(email())
    key = api.call("POST", "/api/auth/keys", session=session, json={"label": "seed"})["key"]
    body = {
        "slug": f"t-{uuid.uuid4().hex[:10]}",
        "name": "Outreach team",
        "description": "writes and sends",
        "visibility": "public",
        "definition": {"version": "v1", "agents": agents, **definition},
    }
    draft = api.call("POST", "/api/templates", key=key, json=body)
    api.call("POST", f"/api/templates/{draft['id']}/publish", key=key, json={"changeLog": "first"})
    install = api.call("POST", "/api/installs", key=key, json={"templateId": draft["id"], "platform": "svc"})
    return session, key, install["installId"]
