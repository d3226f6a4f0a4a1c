"""The payment provider's published API description, as a check on what our fake sees and says.

`tests/fakes/stripe_openapi/spec3.subset.json` (written by `scripts/stripe_openapi.py`) holds
the operations the service calls, pinned to the API version the `stripe` SDK sends. Every
request the fake receives is checked against its operation (path, method, form parameters
as Stripe decodes them: `metadata[k]=v`, `line_items[0][price]=p`), and every answer the fake
gives against the operation's response schema, strictly: an object may carry only the fields
the description names, so a field the real API never returns fails the test too.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator

SPEC_PATH = Path(__file__).parent / "stripe_openapi" / "spec3.subset.json"
FORM = "application/x-www-form-urlencoded"


@cache
def spec() -> dict[str, Any]:
    """The vendored description."""
    return dict(json.loads(SPEC_PATH.read_text()))


def _strict(node: Any, form: bool) -> Any:
    """OpenAPI 3.0 → JSON Schema: `nullable` allows null, objects allow only their fields, and
    (for form bodies) scalars are the strings Stripe's form encoding makes of them."""
    if isinstance(node, list):
        return [_strict(item, form) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _strict(value, form) for key, value in node.items() if key != "nullable"}
    if out.get("type") == "object" and "properties" in out:
        out.setdefault("additionalProperties", False)
    if form:
        kind = out.get("type")
        if "enum" in out:
            out["enum"] = [_form_scalar(value) for value in out["enum"]]
            out["type"] = "string"
        elif kind == "integer":
            out.update(type="string", pattern=r"^-?\d+$")
        elif kind == "number":
            out.update(type="string", pattern=r"^-?\d+(\.\d+)?$")
        elif kind == "boolean":
            out.pop("type")
            out["enum"] = ["true", "false"]
    if node.get("nullable") and not form:
        return {"anyOf": [out, {"type": "null"}]}
    return out


def _form_scalar(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


@cache
def _components(form: bool) -> dict[str, Any]:
    return {name: _strict(schema, form) for name, schema in spec()["components"]["schemas"].items()}


def _validator(schema: dict[str, Any], form: bool) -> Draft7Validator:
    return Draft7Validator({"allOf": [_strict(schema, form)], "components": {"schemas": _components(form)}})


@cache
def _operations() -> list[tuple[re.Pattern[str], str, str]]:
    """(path pattern, method, path template) of every described operation."""
    found = []
    for template, methods in spec()["paths"].items():
        pattern = re.compile("^" + re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)) + "$")
        found.extend((pattern, method, template) for method in methods)
    return found


@cache
def _request_validator(template: str, method: str) -> Draft7Validator:
    operation = spec()["paths"][template][method]
    return _validator(operation["requestBody"]["content"][FORM]["schema"], form=True)


@cache
def _response_validator(template: str, method: str, status: str) -> Draft7Validator:
    responses = spec()["paths"][template][method]["responses"]
    schema = (responses.get(status) or responses["default"])["content"]["application/json"]["schema"]
    return _validator(schema, form=False)


@cache
def _object_validator(component: str) -> Draft7Validator:
    return _validator({"$ref": f"#/components/schemas/{component}"}, form=False)


def _template(method: str, path: str) -> str | None:
    for pattern, known_method, template in _operations():
        if known_method == method.lower() and pattern.match(path):
            return template
    return None


def _messages(validator: Draft7Validator, instance: Any, where: str) -> list[str]:
    return [
        f"{where}: {'.'.join(str(p) for p in error.absolute_path) or '(body)'}: {error.message}"
        for error in sorted(validator.iter_errors(instance), key=lambda e: list(map(str, e.absolute_path)))
    ]


def check_request(method: str, path: str, params: dict[str, Any]) -> list[str]:
    """What the real API would refuse in this request (empty when it is allowed)."""
    template = _template(method, path)
    if template is None:
        return [f"{method} {path}: no such operation in the API description"]
    return _messages(_request_validator(template, method.lower()), params, f"{method} {path} request")


def check_response(method: str, path: str, status: int, body: Any) -> list[str]:
    """What in this answer the real API would never send (empty when it is allowed)."""
    template = _template(method, path)
    if template is None:
        return []  # the request was already reported
    key = "200" if 200 <= status < 300 else "default"
    return _messages(
        _response_validator(template, method.lower(), key), body, f"{method} {path} {status} answer"
    )


def check_object(component: str, obj: Any) -> list[str]:
    """What in an event's object the real API would never send."""
    return _messages(_object_validator(component), obj, f"event object {component}")
