"""Bounds on what one request may carry: install secrets, lists and numbers (OWASP API4)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from api.app import ROUTES
from svc.installs.fields import MAX_INSTALL_SECRETS
from tests.support.accounts import bearer
from tests.support.installs import managed_install as svc_install
from tests.support.installs import published_team
from tests.support.templates import user_with_key


async def patch_secrets(client, key, install_id, body):
    """PATCH /api/installs/:id/secrets; the response."""
    return await client.patch(f"/api/installs/{install_id}/secrets", json=body, headers=bearer(key))


async def test_install_secrets_are_capped_and_written_in_one_batch(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    _owner, key = await user_with_key(client)
    template = await published_team(client, key)
    install_id = (await svc_install(client, key, template["id"]))["installId"]

    too_many = {f"S_{i}": "v" for i in range(MAX_INSTALL_SECRETS + 1)}
    response = await patch_secrets(client, key, install_id, too_many)
    assert response.status == 400
    assert (await response.json())["error"].startswith("secrets: at most 500 names")

    # Up to the cap in one request: every name stored, and remembered in the vault.
    full = {f"S_{i}": f"value-{i}" for i in range(MAX_INSTALL_SECRETS - 10)}
    response = await patch_secrets(client, key, install_id, full)
    assert response.status == 200, await response.text()
    assert len((await response.json())["updatedKeys"]) == MAX_INSTALL_SECRETS - 10
    assert (
        await store["vault_secrets"].count_documents({"key": {"$regex": "^S_"}}) == MAX_INSTALL_SECRETS - 10
    )

    # Overwriting held names does not count twice; new names beyond the cap are refused.
    response = await patch_secrets(
        client, key, install_id, {"S_0": "again", **{f"N_{i}": "v" for i in range(10)}}
    )
    assert response.status == 200, await response.text()
    response = await patch_secrets(client, key, install_id, {"ONE_MORE": "v"})
    assert response.status == 400
    assert "holds 500" in (await response.json())["error"]

    doc = await store.installs.find_one({"_id": install_id})
    assert len(doc["secretsEncrypted"]) == MAX_INSTALL_SECRETS


async def test_racing_secret_merges_cannot_pass_the_cap_together(make_client, store):
    client = await make_client(rate_limit_multiplier=None)
    _owner, key = await user_with_key(client)
    template = await published_team(client, key)
    install_id = (await svc_install(client, key, template["id"]))["installId"]
    base = {f"B_{i}": "v" for i in range(MAX_INSTALL_SECRETS - 5)}
    assert (await patch_secrets(client, key, install_id, base)).status == 200
    # Two merges of 5 new names each: exactly one fits.
    first = {f"X_{i}": "v" for i in range(5)}
    second = {f"Y_{i}": "v" for i in range(5)}
    answers = await asyncio.gather(
        patch_secrets(client, key, install_id, first), patch_secrets(client, key, install_id, second)
    )
    assert sorted(response.status for response in answers) == [200, 400]
    doc = await store.installs.find_one({"_id": install_id})
    assert len(doc["secretsEncrypted"]) == MAX_INSTALL_SECRETS


@pytest.mark.parametrize("field", ["secrets", "variables"])
async def test_ten_valid_merges_at_once_all_land(make_client, store, field):
    """Valid merges never conflict with each other: each of ten at once answers 200 and every
    value is stored (several rounds, since a race that loses now and then must show)."""
    client = await make_client(rate_limit_multiplier=None)
    _owner, key = await user_with_key(client)
    template = await published_team(client, key)
    install_id = (await svc_install(client, key, template["id"]))["installId"]
    names = ["company", "tone"] if field == "variables" else [f"S_{i}" for i in range(10)]
    for round_ in range(4):
        bodies = [{names[i % len(names)]: f"r{round_}-{i}"} for i in range(10)]
        answers = await asyncio.gather(
            *(
                client.patch(f"/api/installs/{install_id}/{field}", json=body, headers=bearer(key))
                for body in bodies
            )
        )
        assert [response.status for response in answers] == [200] * 10, [await r.text() for r in answers]
        doc = await store.installs.find_one({"_id": install_id})
        stored = doc["secretsEncrypted" if field == "secrets" else "variables"]
        assert set(names) <= set(stored)
        if field == "variables":  # each name holds the value of one of the merges that set it
            assert all(stored[name] in {b[name] for b in bodies if name in b} for name in names)


async def test_the_secrets_body_is_capped(make_client):
    client = await make_client(rate_limit_multiplier=None)
    _owner, key = await user_with_key(client)
    template = await published_team(client, key)
    install_id = (await svc_install(client, key, template["id"]))["installId"]
    big = {f"S_{i}": "x" * 60_000 for i in range(20)}
    response = await patch_secrets(client, key, install_id, big)
    assert response.status == 413
    assert await response.json() == {"error": "Request body too large"}


# Free-form objects whose content is validated by a model of its own (named here) before use.
FREE_FORM = {
    ("AssistBody", "currentDefinition"): "validated as a TeamDefinition",
    ("TestChatBody", "definition"): "validated as a TeamDefinition",
}


def unbounded(schema: dict[str, Any], defs: dict[str, Any], path: str, seen: set[str]) -> list[str]:
    """Every field of a JSON schema that takes a list, map, number or string without a bound."""
    if "$ref" in schema:
        name = schema["$ref"].split("/")[-1]
        if name in seen:
            return []
        return unbounded(defs[name], defs, path, seen | {name})
    found: list[str] = []
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key, []):
            found += unbounded(sub, defs, path, seen)
    kind = schema.get("type")
    if kind in ("integer", "number"):
        if not {"maximum", "exclusiveMaximum"} & set(schema) or not {"minimum", "exclusiveMinimum"} & set(
            schema
        ):
            found.append(f"{path}: number without both bounds")
    if kind == "string" and not {"maxLength", "pattern", "enum", "const", "format"} & set(schema):
        found.append(f"{path}: string without maxLength")
    if kind == "array":
        if "maxItems" not in schema:
            found.append(f"{path}: list without maxItems")
        found += unbounded(schema.get("items", {}), defs, f"{path}[]", seen)
    for name, sub in schema.get("properties", {}).items():
        found += unbounded(sub, defs, f"{path}.{name}" if path else name, seen)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        if "maxProperties" not in schema:
            found.append(f"{path}: map without maxProperties")
        found += unbounded(extra, defs, f"{path}{{}}", seen)
    return found


def test_every_body_and_query_field_has_a_bound():
    problems = []
    for route in ROUTES:
        for model in (route.body, route.query):
            if model is None:
                continue
            schema = model.model_json_schema()
            for name, field in schema.get("properties", {}).items():
                if (model.__name__, name) in FREE_FORM:
                    continue
                for problem in unbounded(field, schema.get("$defs", {}), name, set()):
                    problems.append(f"{route.method} {route.path} {model.__name__}.{problem}")
    assert problems == []


@pytest.mark.parametrize(
    ("path_of", "body", "field"),
    [
        (lambda t, i: f"/api/templates/{t}/rollback", {"version": 9223372036854775808}, "version"),
        (lambda t, i: f"/api/templates/{t}/rollback", {"version": 10**30}, "version"),
        (lambda t, i: f"/api/installs/{i}/drafts/bulk", {"action": "approve", "ids": [2**64]}, "ids"),
        (
            lambda t, i: "/api/installs",
            {"templateId": "x", "variables": {f"v{n}": "x" for n in range(101)}},
            "variables",
        ),
        (
            lambda t, i: "/api/installs",
            {"templateId": "x", "credentials": {f"c{n}": "x" for n in range(51)}},
            "credentials",
        ),
        (lambda t, i: "/api/installs", {"templateId": "x", "secrets": {"A": "x" * 70_000}}, "secrets.A"),
    ],
)
async def test_out_of_range_numbers_and_long_lists_are_400s_naming_the_field(
    make_client, path_of, body, field
):
    client = await make_client(rate_limit_multiplier=None)
    _owner, key = await user_with_key(client)
    template = await published_team(client, key)
    install_id = (await svc_install(client, key, template["id"]))["installId"]
    response = await client.post(path_of(template["id"], install_id), json=body, headers=bearer(key))
    assert response.status == 400, await response.text()
    assert (await response.json())["error"].startswith(f"{field}")
