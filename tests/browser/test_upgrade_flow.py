"""The install's Versions tab in a real browser: the available version with its plan, the
permission changes to accept and the value it needs, apply, roll back, the history; the plan
ends up in docs/screenshots/upgrade-plan.png (with SVC_SCREENSHOTS set)."""

from __future__ import annotations

import uuid
from typing import Any

from tests.browser.conftest import Api, LiveServer, Tab


def lead(prompt: str, *hosts: str) -> dict[str, Any]:
    policy = {
        "accessPolicyVersion": "1",
        "defaultAction": "deny",
        "rules": [{"match": {"host": host}, "action": "allow"} for host in hosts],
    }
    return {
        "key": "lead",
        "name": "Lead",
        "model": "providerA:small",
        "prompt": prompt,
        "accessPolicy": policy,
    }


def test_review_the_plan_accept_apply_and_roll_back(tab: Tab, live: LiveServer, api: Api) -> None:
    session = api.signup(f"b-{uuid.uuid4().hex[:10]}@example.com")
    key = api.call("POST", "/api/auth/keys", session=session, json={"label": "seed"})["key"]
    body = {
        "slug": f"t-{uuid.uuid4().hex[:10]}",
        "name": "Research desk",
        "visibility": "public",
        "definition": {"agents": [lead("You research.", "api.example.com")]},
    }
    template = api.call("POST", "/api/templates", key=key, json=body)
    api.call("POST", f"/api/templates/{template['id']}/publish", key=key, json={"changeLog": "first"})
    install_id = api.call(
        "POST", "/api/installs", key=key, json={"templateId": template["id"], "platform": "svc"}
    )["installId"]
    draft = api.call("POST", f"/api/templates/{template['id']}/new-version", key=key)
    newer = {
        "requiredVariables": ["region"],
        "agents": [lead("You research the {{region}} market.", "api.example.com", "*.data.example.org")],
    }
    api.call("PATCH", f"/api/templates/{draft['id']}", key=key, json={"definition": newer})
    api.call(
        "POST", f"/api/templates/{draft['id']}/publish", key=key, json={"changeLog": "regional research"}
    )

    tab.sign_in_as(session)
    page = tab.page
    page.on("dialog", lambda dialog: dialog.accept())
    tab.goto(f"/installs/{install_id}/versions")
    text = page.inner_text("main")
    assert "update available · MAJOR" in text and "widens permissions" in text
    plan = page.locator("#plan-upgrade")
    assert "regional research" in plan.inner_text()
    assert "*.data.example.org" in plan.inner_text(), "the widened host is shown"
    page.fill("input[name='var.region']", "Nordic")
    page.check("input[name=acceptPermissions]")
    tab.shot("upgrade-plan")

    plan.locator("button[type=submit]").click()
    page.wait_for_url(f"{tab.base}/installs/{install_id}/versions")
    assert "Running\nv2" in page.inner_text(".facts") or "v2 (2.0.0)" in page.inner_text(".facts")
    assert "upgrade" in page.locator("section[aria-labelledby=history-h] tbody tr").first.inner_text()

    rollback = page.locator("#plan-rollback")
    assert "Roll back to v1" in rollback.inner_text()
    rollback.locator("button[type=submit]").click()
    page.wait_for_url(f"{tab.base}/installs/{install_id}/versions")
    assert "v1 (1.0.0)" in page.inner_text(".facts")
    history = page.locator("section[aria-labelledby=history-h] tbody tr")
    assert "rollback" in history.first.inner_text() and history.count() == 3
    assert tab.errors == [], tab.errors
