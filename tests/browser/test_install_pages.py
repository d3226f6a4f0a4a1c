"""An install's pages in Chromium, as a deployer meets them (issue 37, item 12): the badge, the run
form, the run page, the schedule form, the installs list and the template browser, and what the
server logs when a person leaves an install page."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.browser.conftest import Api, LiveServer, Tab
from tests.support.dashboard import agent, seeded_install
from tests.support.waiting import wait_until_sync


def badge(tab: Tab) -> tuple[str, str]:
    """The install badge's words and the status whose colour it wears."""
    element = tab.page.locator("h1 [data-badge]")
    return (element.text_content() or "").strip(), element.get_attribute("data-badge") or ""


def test_the_badge_and_the_run_form_say_how_runs_go(tab: Tab, live: LiveServer, api: Api) -> None:
    session, _, install_id = seeded_install(api, [agent("lead")])
    tab.sign_in_as(session)
    tab.goto(f"/installs/{install_id}")
    page = tab.page
    page.wait_for_selector(".live-dot.on")
    assert badge(tab) == ("ready", "ready")  # a fresh install: no green "completed"

    # A run that takes a while: the form says it is running, never "Done", until it completes.
    live.llm.latency_s = 4.0  # long enough for the live table (polled each second) to see it running
    live.llm.script(text="All done")
    page.fill("input[name=task]", "Say hello")
    page.click("form.run-form button[type=submit]")
    page.wait_for_selector("form.run-form .async-status:text-matches('Queued|Starting|Running')")
    assert "Done" not in (page.text_content("form.run-form .async-status") or "")
    page.wait_for_selector("h1 [data-badge=running], h1 [data-badge=queued]")
    page.wait_for_selector("form.run-form .async-status.ok:has-text('Completed')")
    page.wait_for_selector("h1 [data-badge=completed]")
    assert badge(tab) == ("last run completed", "completed")

    # A failed run: the form says so in red, with the reason, and so does the badge.
    live.llm.latency_s = 0.0
    live.llm.fail_next(status=400, message="model refused the request")
    page.fill("input[name=task]", "Fail please")
    page.click("form.run-form button[type=submit]")
    page.wait_for_selector("form.run-form .async-status.error:has-text('Failed')")
    page.wait_for_selector("h1 [data-badge=failed]")
    assert badge(tab)[0] == "last run failed"
    color = page.eval_on_selector("h1 [data-badge]", "e => getComputedStyle(e).color")
    ok_color = page.eval_on_selector(".async-status.error", "e => getComputedStyle(e).color")
    assert color == ok_color  # the badge wears the failure colour, not the success one
    # The other tabs wear the same badge.
    tab.goto(f"/installs/{install_id}/settings")
    assert badge(tab) == ("last run failed", "failed")
    assert tab.errors == []


def test_the_run_page_shows_the_task_the_answer_and_each_step_s_model(
    tab: Tab, live: LiveServer, api: Api
) -> None:
    team = [agent("lead", model="providerA:middle"), agent("helper", reportsTo="lead")]
    session, key, install_id = seeded_install(api, team)
    live.llm.script(tool_calls=[{"name": "delegate_helper", "arguments": {"task": "look it up"}}])
    live.llm.script(text="the helper found 42", input_tokens=7, output_tokens=3)
    live.llm.script(text="The answer is 42.", input_tokens=11, output_tokens=4)
    run = api.call("POST", f"/api/installs/{install_id}/run", key=key, json={"task": "What is the answer?"})
    assert run["status"] == "completed", run
    tab.sign_in_as(session)
    tab.goto(f"/installs/{install_id}/runs/{run['runId']}")
    page = tab.page
    assert page.text_content(".run-task") == "What is the answer?"
    assert page.text_content(".run-response") == "The answer is 42."
    models = {
        row.get_attribute("data-agent"): (row.locator("td:nth-child(2)").text_content() or "").strip()
        for row in page.locator("table.steps tbody tr").all()
    }
    assert models == {"lead": "providerA:middle", "helper": "providerA:small"}
    # The page shows what the run detail API answers, from the same service.
    detail = api.call("GET", f"/api/installs/{install_id}/runs/{run['runId']}", key=key)
    assert [(s["agent"], s["model"]) for s in detail["steps"]] == [
        (row.get_attribute("data-agent"), models[row.get_attribute("data-agent") or ""])
        for row in page.locator("table.steps tbody tr").all()
    ]
    assert "1.0.0" in (page.text_content("h1") or "")  # the version reads as semver, as everywhere
    tab.shot("run-detail")
    assert tab.errors == []


def schedule_tab(browser: Any, live: LiveServer, session: str, zone: str) -> Tab:
    """A tab whose browser lives in `zone` (the schedule form suggests it)."""
    context = browser.new_context(viewport={"width": 1280, "height": 1000}, timezone_id=zone)
    context.set_default_timeout(30_000)
    tab = Tab(context.new_page(), live.base)
    tab.sign_in_as(session)
    return tab


def test_the_schedule_form_keeps_what_was_typed_and_shows_errors_inline(
    browser: Any, live: LiveServer, api: Api
) -> None:
    session, _, install_id = seeded_install(api, [agent("lead")])
    tab = schedule_tab(browser, live, session, "Europe/Berlin")
    tab.goto(f"/installs/{install_id}/schedule")
    page = tab.page
    # The suggested cron's fire times are there on load, before anything is typed.
    assert page.locator("#fire-times li time").count() == 5
    # Time zones are suggested: every IANA zone in the field's list, and the browser's own zone.
    assert page.get_attribute("#timezone", "list") == "zones"
    assert page.locator("#zones option[value='America/New_York']").count() == 1
    assert page.locator("#zones option").count() > 300
    page.click("[data-use-zone]:has-text('Europe/Berlin')")
    assert page.input_value("#timezone") == "Europe/Berlin"
    page.wait_for_selector("#fire-times:has-text('CE')")  # CET or CEST: computed for Berlin

    # A mistyped zone: the stale fire times go, the reason shows as you type.
    page.fill("#timezone", "Europe/Berln")
    page.wait_for_selector("#preview-error:not([hidden]):has-text('did you mean Europe/Berlin')")
    assert page.locator("#fire-times li").count() == 0
    # Saved anyway: the same form comes back as typed, the message at the field; nothing is lost.
    page.fill("#cron", "15 7 * * 1-5")
    page.fill("input[name=label]", "morning digest")
    page.fill("input[name=jitterSeconds]", "30")
    page.check("input[name=onBacklog][value=queue]")
    page.click("button:has-text('Save schedule')")
    page.wait_for_selector("#schedule-error")
    assert page.get_attribute("#timezone", "aria-invalid") == "true"
    assert "unknown IANA time zone" in (page.text_content("#error-timezone") or "")
    assert page.input_value("#timezone") == "Europe/Berln"
    assert page.input_value("#cron") == "15 7 * * 1-5"
    assert page.input_value("input[name=label]") == "morning digest"
    assert page.input_value("input[name=jitterSeconds]") == "30"
    assert page.is_checked("input[name=onBacklog][value=queue]")
    assert page.locator("nav.tabs").count() == 1  # still the install's page, not a dead end
    tab.shot("schedule-inline-error")
    # The form answered 400 (it was refused), which the browser logs as a failed load; nothing else.
    assert tab.errors == ["Failed to load resource: the server responded with a status of 400 (Bad Request)"]
    tab.errors.clear()

    page.fill("#timezone", "Europe/Berlin")
    page.click("button:has-text('Save schedule')")
    page.wait_for_selector("button:has-text('Disable')")
    assert page.input_value("#timezone") == "Europe/Berlin"
    assert page.input_value("input[name=label]") == "morning digest"
    # "Fire now" and "Disable" sit in one row.
    fire, toggle = (
        page.locator(f"button:has-text('{name}')").bounding_box() for name in ("Fire now", "Disable")
    )
    assert fire is not None and toggle is not None and abs(fire["y"] - toggle["y"]) < 2
    assert tab.errors == []
    page.context.close()


def test_leaving_an_install_page_logs_no_error(
    tab: Tab, live: LiveServer, api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    session, _, install_id = seeded_install(api, [agent("lead")])
    tab.sign_in_as(session)
    tab.goto(f"/installs/{install_id}")
    tab.page.wait_for_selector(".live-dot.on")
    tab.page.click("header.top nav a:has-text('Installs')")  # the person leaves the page
    tab.page.wait_for_url(f"{tab.base}/installs")
    live_path = f"/installs/{install_id}/live"

    def ended() -> bool:
        return any(
            r.name == "svc.access" and r.getMessage().startswith(f"GET {live_path} ") for r in caplog.records
        )

    assert wait_until_sync(ended, timeout_s=30), "the live stream's request never ended"
    troubles = [
        f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info
    ]
    assert troubles == []


def test_installs_list_and_the_template_browser(tab: Tab, live: LiveServer, api: Api) -> None:
    # A builder publishes two public templates; a newcomer finds one through the nav and installs it.
    builder, _, _ = seeded_install(api, [agent("lead")])
    key = api.call("POST", "/api/auth/keys", session=builder, json={"label": "more"})["key"]
    body = {
        "slug": f"lighthouse-{live.base.rsplit(':', 1)[1]}",
        "name": "Lighthouse keeper",
        "description": "watches the coast at night",
        "visibility": "public",
        "definition": {"version": "v1", "agents": [agent("keeper")]},
    }
    draft = api.call("POST", "/api/templates", key=key, json=body)
    api.call("POST", f"/api/templates/{draft['id']}/publish", key=key, json={"changeLog": "first"})

    tab.sign_in_as(api.signup("newcomer-" + draft["id"][:8] + "@example.com"))
    tab.goto("/")
    page = tab.page
    page.click("header.top nav a:has-text('Installs')")
    page.wait_for_url(f"{tab.base}/installs")
    assert page.get_attribute("header.top nav a:has-text('Installs')", "aria-current") == "page"
    assert "No installs yet" in (page.text_content("main") or "")
    page.click("header.top nav a:has-text('Browse templates')")
    page.wait_for_url(f"{tab.base}/browse")
    assert page.locator("ul.templates li").count() >= 2
    page.fill("input[name=q]", "COAST")
    page.click("button:has-text('Search')")
    page.wait_for_url("**/browse?q=COAST")
    assert [e.get_attribute("data-template") for e in page.locator("ul.templates li").all()] == [draft["id"]]
    assert "1 agent ·" in (page.text_content("ul.templates") or "")
    page.click("ul.templates a:has-text('Lighthouse keeper')")
    page.wait_for_selector("button:has-text('Install on the managed runtime')")
    page.click("button:has-text('Install on the managed runtime')")
    page.wait_for_selector("#runs")
    assert badge(tab) == ("ready", "ready")
    page.click("header.top nav a:has-text('Installs')")
    page.wait_for_selector("table.list a:has-text('Lighthouse keeper')")
    row = page.text_content("table.list tbody tr") or ""
    assert "ready" in row and "v1.0.0" in row
    assert tab.errors == []
