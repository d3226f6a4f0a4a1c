"""The dashboard's main flows in a real browser, each ending in a screenshot under docs/screenshots/."""

from __future__ import annotations

import json
import re
import uuid

from tests.browser.conftest import Api, LiveServer, Tab
from tests.support.dashboard import PASSWORD, agent, email, seeded_install


def test_sign_up_key_publish_install_and_a_run_appears_live(tab: Tab, live: LiveServer) -> None:
    page = tab.page
    tab.goto("/signup")
    page.fill("input[name=name]", "Builder Bea")
    page.fill("input[name=email]", email())
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{tab.base}/")
    assert "No installs yet" in page.content()

    # A key, shown once with a copy button.
    tab.goto("/keys")
    page.fill("input[name=label]", "laptop")
    page.click("form.panel button[type=submit]")
    raw = page.text_content("#new-key") or ""
    assert raw.startswith("svc_")
    page.click("button[data-copy]")
    page.wait_for_selector(".copy-status:has-text('Copied')")
    assert page.evaluate("navigator.clipboard.readText()") == raw
    tab.shot("keys-created-once")
    tab.goto("/keys")
    assert raw not in page.content()

    # A template: the editor flags an error at its field path as you type, then publishes.
    tab.goto("/templates/new")
    page.fill("input[name=name]", "Greeter")
    page.fill("input[name=slug]", f"greeter-{uuid.uuid4().hex[:8]}")
    page.select_option("select[name=visibility]", "public")
    bad = {"version": "v1", "agents": [agent("lead", model="providerZ:huge")]}
    page.fill("#definition", json.dumps(bad, indent=2))
    page.wait_for_selector("#definition-errors code:has-text('definition.agents[0].model')")
    tab.shot("definition-editor-error")
    page.fill("#definition", json.dumps({"version": "v1", "agents": [agent("lead")]}, indent=2))
    page.wait_for_selector("#definition-errors .ok")
    page.click("button:has-text('Create draft')")
    page.wait_for_selector("button:has-text('Publish')")
    page.fill("input[name=changeLog]", "First release")
    page.click("button:has-text('Publish')")
    page.wait_for_selector("button:has-text('Install on the managed runtime')")
    page.click("button:has-text('Install on the managed runtime')")
    page.wait_for_selector("#runs")
    page.wait_for_selector(".live-dot.on")

    # Run: the row arrives through server-sent events; the page is never reloaded.
    page.evaluate("window.__notReloaded = true")
    live.llm.script(text="Hello from the team", input_tokens=12, output_tokens=5)
    page.fill("input[name=task]", "Say hello")
    page.click("form.run-form button[type=submit]")
    page.wait_for_selector("#runs tr[data-status=completed]")
    assert page.evaluate("window.__notReloaded") is True
    assert "12 / 5" in (page.text_content("#runs tbody") or "")
    tab.shot("install-run-live")
    page.click("#runs tbody a")
    page.wait_for_selector("h3:has-text('Steps')")
    assert "lead" in (page.text_content("table.list") or "")
    assert tab.errors == []


def test_a_pipeline_paused_at_a_gate_approve_continue_completes_live(
    tab: Tab, live: LiveServer, api: Api
) -> None:
    agents = [agent("writer", prompt="Write."), agent("sender", role="sender")]
    gates = [{"name": "draft-approval", "after": "writer", "kind": "draft-approval"}]
    session, key, install_id = seeded_install(api, agents, gates=gates)
    drafts = {
        "drafts": [
            {"recipientEmail": f"p{n}@example.com", "subject": f"Hello {n}", "body": "Hi"} for n in range(2)
        ]
    }
    live.llm.script(text=json.dumps(drafts))
    paused = api.call("POST", f"/api/installs/{install_id}/run", key=key, json={"task": "Write to people"})
    assert paused["status"] == "paused"

    tab.sign_in_as(session)
    tab.goto(f"/installs/{install_id}")
    page = tab.page
    page.wait_for_selector(".live-dot.on")
    page.evaluate("window.__notReloaded = true")
    first, second = page.eval_on_selector_all("article.draft", "els => els.map(e => e.dataset.draft)")
    page.click(f"article[data-draft='{first}'] button:has-text('Approve')")
    page.wait_for_selector(f"article[data-draft='{first}'][data-status=approved]")
    page.fill(f"article[data-draft='{second}'] input[name=note]", "Too formal")
    page.click(f"article[data-draft='{second}'] button:has-text('Reject')")
    page.wait_for_selector(f"article[data-draft='{second}'][data-status=rejected]")
    tab.shot("pipeline-gate-drafts")
    page.click("div.gate button:has-text('Continue')")
    page.wait_for_selector(f"#runs tr[data-run='{paused['runId']}'][data-status=completed]")
    page.wait_for_selector("text=No run is waiting at a gate.")
    assert page.evaluate("window.__notReloaded") is True
    tab.shot("pipeline-completed-live")
    assert tab.errors == []


def test_accept_an_invitation_from_the_mailed_link(tab: Tab, live: LiveServer, api: Api) -> None:
    owner = api.signup(email(), name="Olive Owner")
    org = api.call("POST", "/api/orgs", session=owner, json={"name": f"Acme {uuid.uuid4().hex[:4]}"})["org"]
    guest_email = email()
    api.signup(guest_email, name="Gus Guest")
    api.call("POST", f"/api/orgs/{org['slug']}/invitations", session=owner, json={"email": guest_email})
    mail = live.call(live.store["outbox"].find_one({"to": guest_email, "kind": "org_invitation"}))
    assert mail is not None
    link = re.search(r"https?://\S+/invitations/[A-Za-z0-9_-]+", mail["body"])
    assert link is not None and link.group(0).startswith(live.base)

    page = tab.page
    page.goto(link.group(0))  # signed out: the link leads through sign-in and back
    page.wait_for_url(re.compile(r".*/signin\?next=.*"))
    page.fill("input[name=email]", guest_email)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("button:has-text('Accept the invitation')")
    tab.shot("invitation-accept")
    page.click("button:has-text('Accept the invitation')")
    page.wait_for_url(f"{tab.base}/orgs/{org['slug']}")
    assert guest_email in (page.text_content("table.list") or "")
    tab.shot("org-members")
    assert tab.errors == []


def test_schedule_editor_shows_fire_times_across_daylight_saving(
    tab: Tab, live: LiveServer, api: Api
) -> None:
    session, _, install_id = seeded_install(api, [agent("lead")])
    tab.sign_in_as(session)
    tab.goto(f"/installs/{install_id}/schedule")
    page = tab.page
    # 09:00 on 1 January and 1 July in Berlin: winter (CET, +01:00) and summer (CEST, +02:00).
    page.fill("#cron", "0 9 1 1,7 *")
    page.fill("#timezone", "Europe/Berlin")
    page.wait_for_selector("#fire-times:has-text('CEST') li:nth-child(5) time")
    items = page.eval_on_selector_all("#fire-times li", "els => els.map(e => e.textContent)")
    assert all("09:00" in item for item in items)
    assert any("UTC+01:00" in item and "08:00 UTC" in item for item in items)
    assert any("UTC+02:00" in item and "07:00 UTC" in item for item in items)
    tab.shot("schedule-editor")  # the preview across CET and CEST
    page.fill("#cron", "61 * * * *")
    page.wait_for_selector("#preview-error:not([hidden])")
    page.fill("#cron", "30 2 * * *")
    page.fill("#timezone", "America/New_York")
    page.wait_for_selector("#fire-times:has-text('02:30') li:nth-child(5)")
    page.check("input[name=onBacklog][value=queue]")
    page.click("button:has-text('Save schedule')")
    page.wait_for_selector("button:has-text('Disable')")
    assert page.input_value("#timezone") == "America/New_York"
    page.click("button:has-text('Disable')")
    page.wait_for_selector("button:has-text('Enable')")
    assert tab.errors == []


def test_no_console_errors_on_any_page(tab: Tab, live: LiveServer, api: Api) -> None:
    session, key, install_id = seeded_install(api, [agent("lead")], requiredSecrets=["API_TOKEN"])
    live.llm.script(text="done")
    api.call("POST", f"/api/installs/{install_id}/run", key=key, json={"task": "go"})
    run_id = api.call("GET", f"/api/installs/{install_id}/agent-runs", key=key)["runs"][0]["runId"]
    template_id = api.call("GET", "/api/installs", key=key)["installs"][0]["templateId"]
    org = api.call("POST", "/api/orgs", session=session, json={"name": f"Walk {uuid.uuid4().hex[:4]}"})["org"]
    tab.sign_in_as(session)
    paths = [
        "/",
        "/installs",
        "/browse",
        "/browse?q=outreach",
        "/keys",
        "/templates",
        "/templates/new",
        f"/templates/{template_id}",
        f"/templates/{template_id}/analytics",
        f"/installs/{install_id}",
        f"/installs/{install_id}/runs/{run_id}",
        f"/installs/{install_id}/schedule",
        f"/installs/{install_id}/settings",
        f"/installs/{install_id}/security",
        f"/installs/{install_id}/usage",
        "/orgs",
        f"/orgs/{org['slug']}",
        f"/orgs/{org['slug']}/approvals",
        f"/orgs/{org['slug']}/secrets",
        f"/orgs/{org['slug']}/audit",
        f"/orgs/{org['slug']}/analytics",
        f"/orgs/{org['slug']}/billing",
    ]
    for path in paths:
        tab.goto(path)
        tab.page.wait_for_load_state("load")
        assert tab.errors == [], (path, tab.errors)
    tab.goto(f"/installs/{install_id}/usage")
    tab.shot("usage-charts")
    missing = tab.page.goto(f"{tab.base}/installs/nope")
    assert missing is not None and missing.status == 404
    tab.errors.clear()  # the 404 itself is logged by the browser as a failed resource
