"""The published definition schema and the OpenAPI document are generated, complete and usable."""

from __future__ import annotations

import re

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
