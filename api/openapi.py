"""The OpenAPI 3.1 document, generated from the route table and the pydantic models."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from api.routing import Route

SECURITY: dict[str, list[dict[str, list[str]]]] = {
    "P": [],
    "K": [{"apiKey": []}],
    "S": [{"session": []}],
    "K/S": [{"apiKey": []}, {"session": []}],
    "I": [{"installToken": []}],
    "AK": [{"appKey": []}],
    "T": [],
}
SCHEMES = {
    "apiKey": {"type": "http", "scheme": "bearer", "description": "svc_live_<32 hex> (personal or org key)"},
    "session": {"type": "apiKey", "in": "cookie", "name": "svc_session"},
    "installToken": {"type": "http", "scheme": "bearer", "description": "svc_install_<token>"},
    "appKey": {"type": "http", "scheme": "bearer", "description": "an application key from APP_API_KEYS"},
}
ERROR = {
    "type": "object",
    "properties": {"error": {"type": "string"}},
    "required": ["error"],
    "additionalProperties": True,
}


def build(routes: Iterable[Route], title: str = "svc", version: str = "v1") -> dict[str, Any]:
    """The document for these routes."""
    schemas: dict[str, Any] = {"Error": ERROR}
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        operation: dict[str, Any] = {
            "summary": route.summary,
            "operationId": route.handler.__name__,
            "security": SECURITY[route.auth],
            "x-auth": route.auth,
            "parameters": _parameters(route, schemas),
            "responses": {
                str(route.status): _success(route, schemas),
                "4XX": {
                    "description": "client error",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                },
            },
        }
        if route.body is not None:
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": _ref(route.body, schemas)}},
            }
        paths.setdefault(route.path, {})[route.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version},
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": SCHEMES},
    }


def _success(route: Route, schemas: dict[str, Any]) -> dict[str, Any]:
    if route.response is None:
        return {"description": "success"}
    content = {"application/json": {"schema": _ref(route.response, schemas)}}
    return {"description": "success", "content": content}


def _ref(model: type[BaseModel], schemas: dict[str, Any]) -> dict[str, str]:
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(schema.pop("$defs", {}))
    schemas[model.__name__] = schema
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _parameters(route: Route, schemas: dict[str, Any]) -> list[dict[str, Any]]:
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in re.findall(r"\{([^}]+)\}", route.path)
    ]
    if route.query is not None:
        schema = route.query.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        required = set(schema.get("required", []))
        for name, prop in schema.get("properties", {}).items():
            parameters.append({"name": name, "in": "query", "required": name in required, "schema": prop})
    return parameters
