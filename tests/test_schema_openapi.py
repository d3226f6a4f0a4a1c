"""The published definition schema and the OpenAPI document are generated, complete and usable."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import jsonschema
import pytest

from api.context import ROUTE_TABLE
from svc.templates.resources import PricingOut, TemplateList, TemplateOut, VersionList
from tests.support.accounts import bearer, create_key, signup

VALID = {
    "version": "v1",
    "description": "An outreach team",
    "requiredVariables": ["company"],
    "requiredSecrets": ["CRM_TOKEN"],
    "agents": [
        {
            "key": "lead",
            "name": "Lead",
            "role": "manager",
            "model": "providerA:middle",
            "prompt": "Lead outreach for {{company}}.",
        },
        {
            "key": "writer",
            "name": "Writer",
            "model": "providerC:flash",
            "reportsTo": "lead",
            "accessPolicy": {
                "accessPolicyVersion": "1",
                "defaultAction": "deny",
                "rules": [
                    {
                        "match": {
                            "host": "*.crm.example.com",
                            "methods": ["GET", "POST"],
                            "pathPrefix": "/api",
                        },
                        "action": "allow",
                        "reason": "CRM",
                    },
                    {"match": {"host": "mail.example.com"}, "action": "require_approval"},
                ],
            },
        },
    ],
    "gates": [{"name": "draft-approval", "after": "writer", "kind": "draft-approval"}],
}

INVALID = [
    {**VALID, "agents": []},
    {**VALID, "agents": [{**VALID["agents"][0], "model": "providerZ:huge"}]},
    {**VALID, "agents": [{**VALID["agents"][0], "accessPolicy": {"rules": []}}]},
    {
        **VALID,
        "agents": [
            {
                **VALID["agents"][0],
                "accessPolicy": {"accessPolicyVersion": "1", "rules": [{"action": "block"}]},
            }
        ],
    },
    {
        **VALID,
        "agents": [
            {
                **VALID["agents"][0],
                "accessPolicy": {
                    "accessPolicyVersion": "1",
                    "rules": [{"match": {"host": "a.*.example.com"}, "action": "allow"}],
                },
            }
        ],
    },
    {**VALID, "requiredVariables": ["1bad"]},
    {**VALID, "gates": [{"name": "g", "after": "lead", "kind": "vote"}]},
]


@pytest.fixture
async def schema(client):
    response = await client.get("/api/schema/team/v1.json")
    assert response.status == 200
    return response, await response.json(content_type=None)


async def test_schema_headers(schema):
    response, _ = schema
    assert response.headers["Content-Type"].startswith("application/schema+json")
    assert response.headers["Cache-Control"] == "public, max-age=86400, immutable"
    assert response.headers["Access-Control-Allow-Origin"] == "*"


async def test_schema_is_draft_07_and_accepts_real_definitions(schema):
    _, document = schema
    assert document["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(document)
    jsonschema.Draft7Validator(document).validate(VALID)


@pytest.mark.parametrize("definition", INVALID)
async def test_schema_rejects_invalid_definitions(schema, definition):
    _, document = schema
    assert list(jsonschema.Draft7Validator(document).iter_errors(definition))


async def test_schema_and_api_agree_on_a_valid_definition(client, schema):
    caller = await signup(client)
    key = await create_key(client, caller)
    response = await client.post(
        "/api/templates", json={"slug": "agree", "name": "Agree", "definition": VALID}, headers=bearer(key)
    )
    assert response.status == 201, await response.text()


async def test_openapi_describes_every_route(client):
    response = await client.get("/api/openapi.json")
    assert response.status == 200
    document = await response.json()
    assert document["openapi"].startswith("3.")
    routes = client.server.app[ROUTE_TABLE]
    assert len(routes) > 20
    for route in routes:
        operation = document["paths"].get(route.path, {}).get(route.method.lower())
        assert operation is not None, f"{route.method} {route.path} missing from the OpenAPI document"
        assert operation["x-auth"] == route.auth
        assert operation["summary"], f"{route.method} {route.path} has no docstring"
        if route.body is not None:
            ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            assert ref.rsplit("/", 1)[1] in document["components"]["schemas"]


async def test_openapi_schemas_resolve(client):
    document = await (await client.get("/api/openapi.json")).json()
    text = str(document)
    schemas = document["components"]["schemas"]
    for name in set(re.findall(r"#/components/schemas/([A-Za-z0-9_]+)", text)):
        assert name in schemas, f"dangling reference to {name}"


async def test_responses_fit_their_declared_models(make_client):
    client = await make_client(rate_limit_multiplier=None)
    caller = await signup(client)
    key = bearer(await create_key(client, caller))
    body = {"slug": "fits", "name": "Fits", "visibility": "public", "definition": VALID}
    created = await (await client.post("/api/templates", json=body, headers=key)).json()
    TemplateOut.model_validate(created)
    template_id = created["id"]
    published = await (await client.post(f"/api/templates/{template_id}/publish", headers=key)).json()
    TemplateOut.model_validate(published)
    draft = await (await client.post(f"/api/templates/{template_id}/new-version", headers=key)).json()
    TemplateOut.model_validate(draft)
    await client.delete(f"/api/templates/{draft['id']}", headers=key)
    rollback = await client.post(f"/api/templates/{template_id}/rollback", json={"version": 1}, headers=key)
    TemplateOut.model_validate(await rollback.json())
    TemplateList.model_validate(await (await client.get("/api/templates")).json())
    VersionList.model_validate(await (await client.get(f"/api/templates/{template_id}/versions")).json())
    fork = await (await client.post(f"/api/templates/{template_id}/fork", headers=key)).json()
    TemplateOut.model_validate(fork)
    pricing = {"templateId": template_id, "pricingModel": "per_run", "priceUsdCents": 10}
    priced = await client.patch("/api/billing/pricing", json=pricing, headers=key)
    PricingOut.model_validate(await priced.json())
    archived = await (await client.post(f"/api/templates/{template_id}/archive", headers=key)).json()
    assert TemplateOut.model_validate(archived).installCount == 0


async def test_every_operation_declares_its_success_answer(client):
    document = await (await client.get("/api/openapi.json")).json()
    for route in client.server.app[ROUTE_TABLE]:
        operation = document["paths"][route.path][route.method.lower()]
        success = operation["responses"][str(route.status)]
        where = f"{route.method} {route.path}"
        if route.status == 204:
            assert "content" not in success, where
            continue
        assert route.response is not None, f"{where} has no response model"
        (media_type, body), *_ = success["content"].items()
        assert body["schema"], where
        if media_type == "text/event-stream":
            data = body["schema"]["properties"]["data"]
            assert data["contentMediaType"] == "application/json", where
            assert data["contentSchema"]["oneOf"], where
        else:
            assert body["schema"]["$ref"].rsplit("/", 1)[1] in document["components"]["schemas"], where
        assert "4XX" in operation["responses"] and "429" in operation["responses"], where


async def test_streams_are_documented_as_event_streams(client):
    document = await (await client.get("/api/openapi.json")).json()
    streamed = {
        path
        for path, operations in document["paths"].items()
        for operation in operations.values()
        if "text/event-stream" in operation["responses"].get("200", {}).get("content", {})
    }
    assert streamed == {
        "/api/templates/generate",
        "/api/templates/generate/public",
        "/api/templates/assist",
        "/api/templates/test-chat",
        "/api/installs/{installId}/runs/{runId}/stream",
    }


async def test_auth_codes_are_security_schemes(client):
    document = await (await client.get("/api/openapi.json")).json()
    schemes = document["components"]["securitySchemes"]
    assert schemes["apiKey"]["scheme"] == "bearer"
    session = schemes["session"]
    assert (session["type"], session["in"], session["name"]) == ("apiKey", "cookie", "svc_session")
    expected = {
        "K": [{"apiKey": []}],
        "S": [{"session": []}],
        "K/S": [{"apiKey": []}, {"session": []}],
        "I": [{"installToken": []}],
        "AK": [{"appKey": []}],
    }
    for route in client.server.app[ROUTE_TABLE]:
        operation = document["paths"][route.path][route.method.lower()]
        for requirement in operation["security"]:
            assert set(requirement) <= set(schemes), f"{route.method} {route.path}"
        if route.auth in expected and not route.key_fallback:
            assert operation["security"] == expected[route.auth], f"{route.method} {route.path}"
        if route.optional_key:
            assert operation["security"] == [{}, {"apiKey": []}]
        if route.auth != "P":
            assert "401" in operation["responses"], f"{route.method} {route.path}"
    whoami = document["paths"]["/api/installs/whoami"]["get"]["security"]
    assert whoami == [{"appKey": []}, {"apiKey": []}]
    heartbeat = document["paths"]["/api/runtime/webhook"]["post"]["security"]
    assert heartbeat == [{"runtimeSecret": []}]


async def test_docs_page_is_served_from_here_under_a_strict_policy(client):
    response = await client.get("/docs")
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/html")
    policy = response.headers["Content-Security-Policy"]
    script_src = next(part for part in policy.split(";") if part.strip().startswith("script-src"))
    assert script_src.split() == ["script-src", "'self'"]
    assert "'unsafe-inline'" not in policy and "'unsafe-eval'" not in policy
    assert "frame-ancestors 'none'" in policy
    assert response.headers["X-Frame-Options"] == "DENY"
    page = await response.text()
    assert "<script>" not in page and "http://" not in page and "https://" not in page
    assets = re.findall(r'(?:src|href)="(/docs/assets/[^"]+)"', page)
    assert len(assets) == 4
    assert any("/swagger-ui-dist/5.35.0/" in url for url in assets)
    for url in assets:
        asset = await client.get(url, headers={"Accept-Encoding": "gzip"})
        assert asset.status == 200, url
        assert asset.headers["Cache-Control"] == "public, max-age=31536000, immutable"
        assert asset.headers["Content-Encoding"] == "gzip"
        assert asset.headers["Content-Type"].split(";")[0] in ("application/javascript", "text/css")
        again = await client.get(url, headers={"If-None-Match": asset.headers["ETag"]})
        assert again.status == 304
    missing = await client.get("/docs/assets/swagger-ui-dist/5.35.0/index.html")
    assert missing.status == 404
    assert "error" in await missing.json()


def test_vendored_viewer_is_the_published_package():
    folder = Path(__file__).resolve().parent.parent / "api/reference/vendor/swagger-ui-dist/5.35.0"
    for line in (folder / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name


async def test_rollback_to_a_version_beyond_any_integer_the_store_holds_is_a_400(client):
    caller = await signup(client)
    key = bearer(await create_key(client, caller))
    body = {"slug": "huge", "name": "Huge", "definition": VALID}
    created = await (await client.post("/api/templates", json=body, headers=key)).json()
    await client.post(f"/api/templates/{created['id']}/publish", json={}, headers=key)
    for version in (2**31, 2**63, 59153391114137660030976):
        response = await client.post(
            f"/api/templates/{created['id']}/rollback", json={"version": version}, headers=key
        )
        assert response.status == 400, await response.text()
        assert "version" in (await response.json())["error"]


def test_operation_ids_are_unique_and_every_per_operation_table_names_a_real_one():
    from api import openapi
    from api.app import ROUTES

    names = [route.handler.__name__ for route in ROUTES]
    assert len(names) == len(set(names))
    for table in (openapi.UPSTREAM, openapi.RAW_BODIES, openapi.EXTRA_SECURITY):
        assert set(table) <= set(names)
    document = openapi.build(ROUTES)
    for name in openapi.RAW_BODIES:
        route = next(route for route in ROUTES if route.handler.__name__ == name)
        assert document["paths"][route.path][route.method.lower()]["requestBody"]["required"]


async def test_export_diff_and_schedule_answers_fit_their_declared_models(make_client):
    from api.schemas import ScheduleTriggered, ScheduleView, TemplateExportDocument, VersionDiff

    client = await make_client(rate_limit_multiplier=None)
    caller = await signup(client)
    key = bearer(await create_key(client, caller))
    body = {"slug": "shapes", "name": "Shapes", "visibility": "public", "definition": VALID}
    created = await (await client.post("/api/templates", json=body, headers=key)).json()
    await client.post(f"/api/templates/{created['id']}/publish", json={}, headers=key)
    exported = await client.get(f"/api/templates/{created['id']}/export?history=true", headers=key)
    TemplateExportDocument.model_validate(await exported.json())
    diff = await client.get(f"/api/templates/{created['id']}/versions/1/diff/1", headers=key)
    assert diff.status == 200, await diff.text()
    VersionDiff.model_validate(await diff.json())
    pipeline_key = bearer(await create_key(client, caller))
    installed = await client.post(
        "/api/installs",
        json={"templateId": created["id"], "platform": "svc", "variables": {"company": "Acme"}},
        headers=pipeline_key,
    )
    install_id = (await installed.json())["installId"]
    schedule = {"cronExpression": "0 9 * * 1", "timezone": "Europe/Paris"}
    saved = await client.patch(f"/api/installs/{install_id}/schedule", json=schedule, headers=key)
    assert saved.status == 200, await saved.text()
    view = await client.get(f"/api/installs/{install_id}/schedule", headers=key)
    assert ScheduleView.model_validate(await view.json()).schedule is not None
    triggered = await client.post(f"/api/installs/{install_id}/schedule/trigger", headers=key)
    assert triggered.status == 200, await triggered.text()
    ScheduleTriggered.model_validate(await triggered.json())


def test_every_tag_is_described_in_complete_sentences_without_internal_names():
    """Each group of routes reads as a sentence for an API user (issue 37): no cut-off first line
    of a docstring, no module, file or design-document names, no auth-code shorthand."""
    from api import openapi
    from api.app import ROUTES

    document = openapi.build(ROUTES)
    tags = {tag["name"]: tag["description"] for tag in document["tags"]}
    assert set(tags) == set(openapi.TAG_DESCRIPTIONS)  # every built-in group has its own words
    jargon = re.compile(r"svc\.|\.py\b|design|spec\b|K/S|`|\(S\)|\bRULES\b")
    for name, text in tags.items():
        assert text[0].isupper() and text.endswith(".") and not text.endswith(".."), (name, text)
        assert text.count("(") == text.count(")"), (name, text)
        assert not jargon.search(text), (name, text)
    # Another module's routes (a plugin's) get their module docstring's whole first sentence,
    # even when it runs over several lines.
    import api.origins

    first = openapi.tag_description(api.origins.__name__)
    assert first.startswith("Which origin may change state") and first.endswith("cookie's `Secure` flag.")
