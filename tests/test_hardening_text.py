"""Display names and descriptions refuse control and bidi characters, naming the field."""

from __future__ import annotations

import pytest

from svc.core.text import check_multi_line, check_single_line
from tests.support.accounts import bearer, signup
from tests.support.orgs import create_org
from tests.support.templates import agent, definition, template_body, user_with_key

REFUSED = [
    "\x00",
    "\x1b[31m",
    "\x7f",
    "\u202e",
    "\u202d",
    "\u2066",
    "\u2069",
    "\u200f",
    "\u061c",
    "\u2028",
    "\x85",
]


@pytest.mark.parametrize("char", REFUSED)
def test_names_refuse_each_control_and_bidi_character(char):
    with pytest.raises(ValueError, match="control or bidi"):
        check_single_line(f"Acme{char}Corp")
    with pytest.raises(ValueError, match="control or bidi"):
        check_multi_line(f"Acme{char}Corp")


def test_line_breaks_only_in_descriptions():
    assert check_multi_line("line one\nline two\r\n\tindented") == "line one\nline two\r\n\tindented"
    with pytest.raises(ValueError):
        check_single_line("two\nlines")
    assert check_single_line("Société Générale — ünïcode ok 日本") == "Société Générale — ünïcode ok 日本"


async def test_every_display_field_answers_400_naming_it(client):
    owner = await signup(client)
    response = await client.post(
        "/api/auth/signup",
        json={"email": "bidi@example.com", "password": "correct horse battery", "name": "Eve\u202e"},
    )
    assert response.status == 400
    assert (await response.json())["error"].startswith("name: must not contain control or bidi characters")

    response = await client.post("/api/orgs", json={"name": "Acme\u202eCorp"}, headers=owner.cookie)
    assert response.status == 400
    assert (await response.json())["error"].startswith("name: must not contain")
    org = await create_org(client, owner, "Acme")
    response = await client.patch(f"/api/orgs/{org['slug']}", json={"name": "A\x00B"}, headers=owner.cookie)
    assert response.status == 400
    assert (await response.json())["error"].startswith("name: must not contain")

    _user, key = await user_with_key(client)
    cases = [
        ({"name": "Team\x1b[2J"}, "name"),
        ({"ownerTeam": "ops\u2066"}, "ownerTeam"),
        ({"description": "fine\nbut \u202e not"}, "description"),
        ({"definition": definition(agent("lead", name="Lead\u202e"))}, "definition.agents[0].name"),
        ({"definition": definition(agent("lead", title="Boss\x07"))}, "definition.agents[0].title"),
    ]
    for fields, field in cases:
        response = await client.post("/api/templates", json=template_body(**fields), headers=bearer(key))
        assert response.status == 400, fields
        assert (await response.json())["error"].startswith(f"{field}: must not contain"), fields
    response = await client.post(
        "/api/templates", json=template_body(description="two\nlines\tfine"), headers=bearer(key)
    )
    assert response.status == 201, await response.text()
