"""The OpenAPI 3.1 document, generated from the route table and the pydantic models.

Every operation states its success body (the route's `response` model; 204 routes
have none), its auth code (the spec's legend) both as `x-auth` and as security
requirements over the schemes below, and the error answers a client must expect.
Event streams are documented under `text/event-stream`: the schema of one event,
whose `data` line holds JSON of one of the stream's event models (`contentSchema`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from api.routing import AuthCode, Route
from api.schemas.common import EventStream

# The spec's auth legend, and the security requirement each code stands for (alternatives, any one
# suffices). T (the webhook token in the path) cannot be a security scheme in OpenAPI: the token is
# the `token` path parameter.
AUTH_CODES: dict[AuthCode, str] = {
    "P": "public, no credential",
    "K": "API key in the Authorization bearer header",
    "S": "session cookie svc_session",
    "K/S": "either an API key or the session cookie",
    "I": "install token in the bearer header",
    "T": "webhook token in the path",
    "AK": "application API key (bearer)",
}
SECURITY: dict[AuthCode, list[dict[str, list[str]]]] = {
    "P": [],
    "K": [{"apiKey": []}],
    "S": [{"session": []}],
    "K/S": [{"apiKey": []}, {"session": []}],
    "I": [{"installToken": []}],
    "AK": [{"appKey": []}],
    "T": [],
}
SCHEMES: dict[str, dict[str, str]] = {
    "apiKey": {
        "type": "http",
        "scheme": "bearer",
        "description": "Auth code K: a personal or org key, `svc_live_<32 hex>`.",
    },
    "session": {
        "type": "apiKey",
        "in": "cookie",
        "name": "svc_session",
        "description": "Auth code S: the session cookie set by signup and login.",
    },
    "installToken": {
        "type": "http",
        "scheme": "bearer",
        "description": "Auth code I: `svc_install_<token>`, provisioned at deploy time (run ingest only).",
    },
    "appKey": {
        "type": "http",
        "scheme": "bearer",
        "description": "Auth code AK: an application key from APP_API_KEYS (`<installId>:<key>`).",
    },
    "runtimeSecret": {
        "type": "apiKey",
        "in": "header",
        "name": "X-Svc-Webhook-Secret",
        "description": "The per-install secret the managed runtime gave orchA at install time.",
    },
}
# Credentials a route checks itself, beyond its auth code (keyed by operationId).
EXTRA_SECURITY: dict[str, list[dict[str, list[str]]]] = {
    "runtime_webhook": [{"runtimeSecret": []}],
}
# Server-side answers a route gives by design (an upstream or an unconfigured provider), by operationId.
UPSTREAM: dict[str, dict[int, str]] = {
    "health": {503: "a dependency does not answer: {error, status: degraded, checks}"},
    "create_install": {502: "the platform refused or failed: {error, upstreamStatus}"},
    "delete_install": {502: "orchC: the stored credentials cannot delete the agents"},
    "invoke": {502: "the platform refused or failed: {error, upstreamStatus}"},
    "upgrade_install": {502: "the platform refused the change (undone): {error, upstreamStatus}"},
    "rollback_install": {502: "the platform refused the change (undone): {error, upstreamStatus}"},
    "runtime_webhook_test": {502: "the model provider failed"},
    **{
        name: {503: "the runtime is not available; Retry-After says when to try again"}
        for name in (
            "run",
            "webhook_trigger",
            "runtime_webhook",
            "continue_run",
            "approve_draft",
            "cancel_run",
            "trigger_schedule",
            "retry_run",
        )
    },
    **{
        name: {503: "the model provider is not configured"}
        for name in ("generate", "generate_public", "assist", "test_chat")
    },
    **{
        name: {502: "the payment provider failed", 503: "no payment provider is configured"}
        for name in (
            "billing_checkout",
            "billing_portal",
            "billing_cancel",
            "setup_intent",
            "connect_onboard",
            "connect_status",
            "charge_cycle",
            "cancel_install",
            "webhook",
        )
    },
}


def _names_to_strings(wrapper: str) -> dict[str, Any]:
    """A flat object of names to strings, or the same wrapped in `{wrapper: {...}}`."""
    flat = {
        "type": "object",
        "minProperties": 1,
        "additionalProperties": {"type": "string", "maxLength": 65_536},
    }
    wrapped = {
        "type": "object",
        "properties": {wrapper: flat},
        "required": [wrapper],
        "additionalProperties": False,
    }
    return {"oneOf": [flat, wrapped]}


# Bodies that a handler reads itself (no `body=` model), documented here, by operationId.
RAW_BODIES: dict[str, dict[str, Any]] = {
    "set_variables": _names_to_strings("variables"),
    "set_secrets": _names_to_strings("secrets"),
    "import_template": {"$ref": "#/components/schemas/TemplateExportDocument"},
    "webhook": {
        "type": "object",
        "description": "A payment-provider event, verified against the raw body and `Stripe-Signature`",
    },
}
ERROR = {
    "type": "object",
    "description": "Every error answer; some carry the extra fields the spec names (canArchive, hint, ...).",
    "properties": {"error": {"type": "string"}},
    "required": ["error"],
    "additionalProperties": True,
}


# What each group of routes (a handler module) is for, as a reader of the reference sees it:
# complete sentences, in the words of the API, never of the code behind it. A route of another
# module (a plugin's) is described by its module docstring's first sentence.
TAG_DESCRIPTIONS = {
    "health": "Whether the service can reach its database and its runtime.",
    "accounts": "Sign up, sign in and out with a session, read and change your profile, and create, "
    "list and revoke your personal API keys.",
    "installs": "Install a published template on a platform, list your installs, set their variables, "
    "secrets and credentials, remove them, and find out which install a key belongs to.",
    "authoring": "Write team definitions with a model's help: generate one from a description, change "
    "one by instruction, and try it in a chat; the answers stream as server-sent events.",
    "templates": "Team templates: create, edit, check, publish and version them, roll back and fork, "
    "list and search the published ones, set their price, export and import them, and read the "
    "definition's JSON Schema.",
    "runtime": "Run an install on the managed runtime and wait for its answer, start runs from a "
    "webhook, receive platform heartbeats, and read each install's access policies and security log.",
    "console": "Operate an install: its events, run log and agent steps, its schedule, its gates and "
    "drafts queue, continuing a paused run and cancelling the active one, and its audit timeline.",
    "billing": "The usage bill of an install, payment methods, monthly charges and cancelling them, "
    "builder payouts and earnings, and the payment provider's webhook.",
    "orgs": "Organisations: members and roles, invitations, organisation keys, approval of new "
    "deployments, shared secrets, the plan and its billing, the audit log and analytics.",
    "runs": "Run reports sent by platform integrations, and run analytics for template builders.",
    "run_watch": "What happened in one run, and its events as they happen.",
    "mcp": "MCP tools for managed agents: the operator's catalogue of servers, an install's servers "
    "and their tools, accepting or refusing those tools, and approving or rejecting single tool calls.",
    "caps": "Spend limits of an install, and sending a run's callback again.",
    "upgrades": "Moving an install to another version of its template: the versions it can move to, "
    "the plan of a move, applying it or rolling it back, and automatic upgrades.",
    "evals": "Evaluation suites of templates: running a suite on the managed runtime, its scorecards, "
    "and the run behind each case.",
    "openapi": "This reference, as an OpenAPI document.",
}


def tag_description(module: str) -> str:
    """The tag's text: from the table above, else the first sentence of the module's docstring."""
    tag = module.rsplit(".", 1)[-1]
    if tag in TAG_DESCRIPTIONS:
        return TAG_DESCRIPTIONS[tag]
    text = " ".join((sys.modules[module].__doc__ or tag).split())
    return text.split(". ", 1)[0].rstrip(".") + "."


def build(routes: Iterable[Route], title: str = "svc", version: str = "v1") -> dict[str, Any]:
    """The document for these routes."""
    schemas: dict[str, Any] = {"Error": ERROR}
    paths: dict[str, dict[str, Any]] = {}
    tags: dict[str, str] = {}
    for route in routes:
        name = route.handler.__name__
        module = route.handler.__module__
        tag = module.rsplit(".", 1)[-1]
        tags.setdefault(tag, tag_description(module))
        operation: dict[str, Any] = {
            "summary": route.summary,
            "description": _description(route),
            "operationId": name,
            "tags": [tag],
            "security": _security(route),
            "x-auth": route.auth,
            "parameters": _parameters(route, schemas),
            "responses": {str(route.status): _success(route, schemas), **_errors(route)},
        }
        body = _ref(route.body, schemas) if route.body is not None else RAW_BODIES.get(name)
        if body is not None:
            operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
        paths.setdefault(route.path, {})[route.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": title,
            "version": version,
            "description": "Registry and deployment service for AI agent teams. Auth codes: "
            + "; ".join(f"{code}: {meaning}" for code, meaning in AUTH_CODES.items())
            + ".",
        },
        "tags": [{"name": tag, "description": text} for tag, text in tags.items()],
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": SCHEMES},
    }


def _description(route: Route) -> str:
    """The whole docstring, then the auth code in words."""
    doc = " ".join((route.handler.__doc__ or "").split())
    auth = f"Auth {route.auth}: {AUTH_CODES[route.auth]}"
    if route.optional_key:
        auth += "; an API key, when given, also shows the caller's own records"
    if route.key_fallback:
        auth += "; a personal or org key linked to an install is accepted too"
    return f"{doc}\n\n{auth}."


def _security(route: Route) -> list[dict[str, list[str]]]:
    """The security requirements: an optional key adds the anonymous alternative `{}`."""
    requirement = EXTRA_SECURITY.get(route.handler.__name__, SECURITY[route.auth])
    if route.optional_key:
        return [{}, {"apiKey": []}]
    if route.key_fallback:
        return [*requirement, {"apiKey": []}]
    return requirement


def _success(route: Route, schemas: dict[str, Any]) -> dict[str, Any]:
    """The success answer: no body for 204, an event stream, or a JSON (or JSON-typed) body."""
    model = route.response
    if model is None:
        return {"description": "success, no body"} if route.status == 204 else {"description": "success"}
    description = (model.__doc__ or "success").strip().splitlines()[0]
    if issubclass(model, EventStream):
        # OpenAPI 3.1 reads the schema of an event stream as the schema of one event (3.2's
        # itemSchema): its `data` line is JSON of one of the event models.
        events = _ref_union(model.model_fields["event"].annotation, schemas)
        event = {
            "type": "object",
            "required": ["data"],
            "properties": {
                "event": {"type": "string"},
                "data": {"type": "string", "contentMediaType": "application/json", "contentSchema": events},
            },
        }
        return {"description": description, "content": {EventStream.media_type: {"schema": event}}}
    media_type = getattr(model, "media_type", "application/json")
    content = {media_type: {"schema": _ref(model, schemas)}}
    content.update({other: {"schema": schema} for other, schema in getattr(model, "also", {}).items()})
    return {"description": description, "content": content}


def _errors(route: Route) -> dict[str, Any]:
    """The error answers: every 4xx, 401 when a credential is needed, 503 (a dependency is down,
    on any route), and the by-design 5xx of the route (an upstream, an unconfigured provider)."""
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    answers: dict[str, Any] = {}
    if route.auth != "P" or route.handler.__name__ in EXTRA_SECURITY:
        answers["401"] = {"description": "missing, invalid or expired credential", "content": error}
    answers["429"] = {
        "description": "rate limit exceeded",
        "headers": {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds to wait"}},
        "content": error,
    }
    answers["4XX"] = {"description": "client error", "content": error}
    answers["503"] = {
        "description": "a dependency is unavailable (the database, the runtime, a driver); see Retry-After",
        "headers": {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds to wait"}},
        "content": error,
    }
    for status, meaning in UPSTREAM.get(route.handler.__name__, {}).items():
        answers[str(status)] = {**answers.get(str(status), {}), "description": meaning, "content": error}
    return answers


def _ref(model: type[BaseModel], schemas: dict[str, Any]) -> dict[str, str]:
    """Put the model (and the models it uses) in components; a reference to it."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, definition in {**schema.pop("$defs", {}), model.__name__: schema}.items():
        if schemas.setdefault(name, definition) != definition:
            raise ValueError(f"two different models are both named {name}")
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _ref_union(annotation: Any, schemas: dict[str, Any]) -> dict[str, Any]:
    """`oneOf` over the members of a union of models."""
    members = getattr(annotation, "__args__", (annotation,))
    return {"oneOf": [_ref(member, schemas) for member in members]}


def _parameters(route: Route, schemas: dict[str, Any]) -> list[dict[str, Any]]:
    parameters: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in re.findall(r"\{([^}]+)\}", route.path)
    ]
    if route.handler.__name__ == "webhook":
        parameters.append(
            {
                "name": "Stripe-Signature",
                "in": "header",
                "required": True,
                "schema": {"type": "string"},
                "description": '`t=<unix time>,v1=<HMAC-SHA256 of "<t>.<raw body>">`',
            }
        )
    if route.auth == "T":
        for parameter in parameters:
            if parameter["name"] == "token":
                parameter["description"] = "Auth T: the webhook token, the only credential of this route"
    if route.query is not None:
        schema = route.query.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        required = set(schema.get("required", []))
        for name, prop in schema.get("properties", {}).items():
            parameters.append({"name": name, "in": "query", "required": name in required, "schema": prop})
    return parameters
