"""A builder's pages in Chromium (issue 37, item 12): the editor on a server where only providerB is
configured, the new-template form's slug, a draft's one change log, versions, layout, chart
captions and an empty security log."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from config.settings import Settings
from tests.browser.conftest import Api, LiveServer, Tab
from tests.support.dashboard import agent, seeded_install


@pytest.fixture
def only_b(make_settings: Callable[..., Settings], ray_session: None) -> Iterator[LiveServer]:
    """The service with providerB the only provider configured (as with a local Ollama)."""

    def settings(**overrides: Any) -> Settings:
        overrides["providers"] = {"providerB": {"api_key": "ollama", "base_url": "http://127.0.0.1:9/v1"}}
        return make_settings(**overrides)

    with LiveServer(settings) as server:
        yield server


# The page's words, without the team definition itself (whose own "version": "v1" is the schema's).
PROSE = """() => {
  const main = document.querySelector("main").cloneNode(true);
  main.querySelectorAll("pre, textarea").forEach((element) => element.remove());
  return main.textContent;
}"""


def editor_text(page: Any) -> dict[str, Any]:
    """The definition the editor holds."""
    return dict(json.loads(page.input_value("#definition")))


def test_the_editor_starts_on_a_configured_provider_and_warns_about_another(
    browser: Any, only_b: LiveServer
) -> None:
    api = Api(only_b.base)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = Tab(context.new_page(), only_b.base)
    tab.sign_in_as(api.signup("editor-b@example.com"))
    tab.goto("/templates/new")
    page = tab.page
    assert editor_text(page)["agents"][0]["model"] == "providerB:standard"
    page.wait_for_selector("#definition-errors .ok:has-text('Valid team definition.')")
    assert page.locator("#definition-errors ul.warnings").count() == 0

    # The slug follows the name, until the builder edits it.
    page.fill("input[name=name]", "Crème Research Crew")
    assert page.input_value("input[name=slug]") == "creme-research-crew"
    page.fill("input[name=slug]", "my-crew")
    page.fill("input[name=name]", "Crème Research Crew 2")
    assert page.input_value("input[name=slug]") == "my-crew"

    # A model of a provider this server has no key for: valid, with a warning as you type.
    definition = editor_text(page)
    definition["agents"][0]["model"] = "providerA:small"
    page.fill("#definition", json.dumps(definition, indent=2))
    page.wait_for_selector(
        "#definition-errors ul.warnings:has-text('providerA is not configured on this server')"
    )
    assert page.locator("#definition-errors .ok").count() == 1  # still a valid definition
    assert page.get_attribute("#definition", "aria-invalid") == "false"
    tab.shot("definition-editor-warning")
    # Never refused: the draft is created, and its page warns again on load.
    page.click("button:has-text('Create draft')")
    page.wait_for_selector("button:has-text('Save draft')")
    page.wait_for_selector("#definition-errors ul.warnings:has-text('providerA')")
    assert tab.errors == []
    context.close()
    api.http.close()


def test_a_draft_has_one_change_log_versions_read_alike_and_buttons_share_a_row(
    tab: Tab, live: LiveServer, api: Api
) -> None:
    session, key, install_id = seeded_install(api, [agent("lead")])
    tab.sign_in_as(session)
    template_id = api.call("GET", "/api/installs", key=key)["installs"][0]["templateId"]
    page = tab.page

    # A version draft: one change log field; Publish saves what the editor holds, then publishes.
    tab.goto(f"/templates/{template_id}")
    page.click("button:has-text('New version')")
    page.wait_for_selector("button:has-text('Save draft')")
    assert page.locator("input[name=changeLog]").count() == 1
    definition = editor_text(page)
    definition["agents"][0]["prompt"] = "You lead, briefly."
    page.fill("#definition", json.dumps(definition, indent=2))
    page.fill("input[name=changeLog]", "Shorter answers")
    page.click("button:has-text('Publish')")
    page.wait_for_selector("button:has-text('New version')")
    assert page.url == f"{tab.base}/templates/{template_id}"
    published = api.call("GET", f"/api/templates/{template_id}")
    assert published["definition"]["agents"][0]["prompt"] == "You lead, briefly."
    assert published["semver"] == "1.0.1"
    history = page.text_content("table.list") or ""
    assert "Shorter answers" in history and "v1.0.1" in history

    # New version and Archive sit side by side.
    new, archive = (
        page.locator(f"button:has-text('{name}')").bounding_box() for name in ("New version", "Archive")
    )
    assert new is not None and archive is not None and abs(new["y"] - archive["y"]) < 2
    assert archive["x"] > new["x"] + new["width"]

    # One way of writing versions: semver, with a v, on every page.
    tab.goto(f"/templates/{template_id}")
    assert "v1.0.1" in (page.text_content("h1") or "")
    tab.goto("/templates")
    assert "v1.0.1" in (page.text_content("#h-published + table") or "")
    tab.goto(f"/installs/{install_id}")
    assert "v1.0.0" in (page.text_content("h1") or "")  # installed before the new version
    tab.goto("/installs")
    assert "v1.0.0" in (page.text_content("table.list") or "")
    for path in (f"/templates/{template_id}", "/templates", f"/installs/{install_id}", "/installs"):
        tab.goto(path)
        assert not re.search(r"\bv\d+\b(?!\.)", page.evaluate(PROSE)), path  # no bare "v1" anywhere

    # Chart captions count in words that fit, and an empty security log says what it is.
    live.llm.script(text="done")
    api.call("POST", f"/api/installs/{install_id}/run", key=key, json={"task": "go"})
    tab.goto(f"/installs/{install_id}/usage")
    captions = " ".join(page.locator("figcaption").all_text_contents())
    assert "1 bar," in captions and "1 bars" not in captions
    tab.goto(f"/installs/{install_id}/security")
    summary = page.text_content("#log-summary") or ""
    assert summary.startswith("No entries yet") and "0 of" not in summary
    assert tab.errors == []
