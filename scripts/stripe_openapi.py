"""Refresh the vendored description of the payment provider's endpoints we call.

Writes `tests/fakes/stripe_openapi/spec3.subset.json`: an OpenAPI 3.0 document with only
the paths (and the schemas they use) of the endpoints in `ENDPOINTS`, pinned to the API
version the installed `stripe` SDK sends (`stripe.api_version`). The fake provider checks
every request and every answer against it (tests/fakes/stripe_contract.py).

Two sources, one output shape:

- `--spec PATH` (preferred): Stripe's published `openapi/spec3.json` (the `stripe/openapi`
  repository, at the tag whose `info.version` equals `stripe.api_version`). Request
  bodies are copied as published; response schemas are copied with the components they
  reference, to `--depth` levels (deeper references become `{}`: not checked).
- `--from-sdk`: the types the installed SDK was generated with from that same description
  (`stripe/params/*` for requests, the resource classes for answers). Used when the
  published file cannot be had at the SDK's version; it loses what the SDK's types do not
  carry (which response fields are always present, and enums the SDK widens to `str`).

Run: `.venv/bin/python scripts/stripe_openapi.py --from-sdk` (or `--spec spec3.json`).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import types
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "tests" / "fakes" / "stripe_openapi" / "spec3.subset.json"

# (method, path as the spec names it, SDK params class, SDK resource class, component name)
ENDPOINTS: tuple[tuple[str, str, str, str, str], ...] = (
    ("post", "/v1/customers", "CustomerCreateParams", "Customer", "customer"),
    ("post", "/v1/setup_intents", "SetupIntentCreateParams", "SetupIntent", "setup_intent"),
    ("post", "/v1/accounts", "AccountCreateParams", "Account", "account"),
    ("get", "/v1/accounts/{account}", "AccountRetrieveParams", "Account", "account"),
    (
        "post",
        "/v1/accounts/{account}/login_links",
        "AccountLoginLinkCreateParams",
        "LoginLink",
        "login_link",
    ),
    ("post", "/v1/account_links", "AccountLinkCreateParams", "AccountLink", "account_link"),
    ("post", "/v1/payment_intents", "PaymentIntentCreateParams", "PaymentIntent", "payment_intent"),
    ("get", "/v1/payment_intents/{intent}", "PaymentIntentRetrieveParams", "PaymentIntent", "payment_intent"),
    ("post", "/v1/transfers", "TransferCreateParams", "Transfer", "transfer"),
    ("post", "/v1/checkout/sessions", "checkout.SessionCreateParams", "checkout.Session", "checkout.session"),
    (
        "post",
        "/v1/billing_portal/sessions",
        "billing_portal.SessionCreateParams",
        "billing_portal.Session",
        "billing_portal.session",
    ),
    (
        "post",
        "/v1/subscriptions/{subscription_exposed_id}",
        "SubscriptionUpdateParams",
        "Subscription",
        "subscription",
    ),
    (
        "get",
        "/v1/subscriptions/{subscription_exposed_id}",
        "SubscriptionRetrieveParams",
        "Subscription",
        "subscription",
    ),
    (
        "delete",
        "/v1/subscriptions/{subscription_exposed_id}",
        "SubscriptionCancelParams",
        "Subscription",
        "subscription",
    ),
)

# Objects that arrive in webhook events we handle (their schemas are vendored too).
EVENT_OBJECTS = ("payment_intent", "account", "subscription", "checkout.session", "transfer")

# The published `error` schema (components.schemas.api_errors), which the SDK has no type for.
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["type"],
            "properties": {
                "advice_code": {"type": "string"},
                "charge": {"type": "string"},
                "code": {"type": "string"},
                "decline_code": {"type": "string"},
                "doc_url": {"type": "string"},
                "message": {"type": "string"},
                "network_advice_code": {"type": "string"},
                "network_decline_code": {"type": "string"},
                "param": {"type": "string"},
                "payment_intent": {"$ref": "#/components/schemas/payment_intent"},
                "payment_method": {"type": "object"},
                "payment_method_type": {"type": "string"},
                "request_log_url": {"type": "string"},
                "setup_intent": {"type": "object"},
                "source": {"type": "object"},
                "type": {
                    "enum": ["api_error", "card_error", "idempotency_error", "invalid_request_error"],
                    "type": "string",
                },
            },
        }
    },
}


def _document(version: str, source: str) -> dict[str, Any]:
    return {
        "openapi": "3.0.0",
        "info": {
            "title": "Stripe API (the endpoints this service calls)",
            "version": version,
            "x-source": source,
        },
        "paths": {},
        "components": {"schemas": {"error": ERROR_SCHEMA}},
        "x-event-objects": list(EVENT_OBJECTS),
    }


def _operation(body: dict[str, Any], component: str) -> dict[str, Any]:
    return {
        "requestBody": {"content": {"application/x-www-form-urlencoded": {"schema": body}}},
        "responses": {
            "200": {
                "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{component}"}}}
            },
            "default": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/error"}}}},
        },
    }


# ---- from the published description -----------------------------------------------------------


def from_spec(spec: dict[str, Any], depth: int) -> dict[str, Any]:
    """The subset of a published spec3.json: our operations and what their answers reference."""
    doc = _document(spec["info"]["version"], "stripe/openapi openapi/spec3.json")
    schemas: dict[str, Any] = spec["components"]["schemas"]
    wanted: dict[str, int] = {}
    for method, path, _, _, component in ENDPOINTS:
        operation = spec["paths"][path][method]
        content = (operation.get("requestBody") or {}).get("content") or {}
        body = (content.get("application/x-www-form-urlencoded") or {}).get("schema") or {
            "type": "object",
            "properties": {},
        }
        if method in ("get", "delete"):  # query parameters, as one form object
            body = {
                "type": "object",
                "properties": {
                    p["name"]: p.get("schema", {})
                    for p in operation.get("parameters", [])
                    if p["in"] == "query"
                },
            }
        doc["paths"].setdefault(path, {})[method] = _operation(body, component)
        wanted[component] = 0
    for name in EVENT_OBJECTS:
        wanted.setdefault(name, 0)
    done: dict[str, Any] = {}
    while wanted:
        name, level = wanted.popitem()
        if name in done:
            continue
        done[name] = _prune(schemas[name], level, depth, wanted)
    doc["components"]["schemas"].update(done)
    doc["components"]["schemas"]["error"] = ERROR_SCHEMA
    return doc


def _prune(node: Any, level: int, depth: int, wanted: dict[str, int]) -> Any:
    """Copy a schema; references past `depth` become `{}` (present, not checked)."""
    if isinstance(node, list):
        return [_prune(item, level, depth, wanted) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        if level + 1 > depth:
            return {}
        name = ref.rsplit("/", 1)[-1]
        wanted.setdefault(name, level + 1)
        return {"$ref": ref}
    return {
        key: _prune(value, level, depth, wanted)
        for key, value in node.items()
        if key not in ("description", "x-expansionResources", "x-stripeBypassValidation")
    }


# ---- from the SDK's generated types ---------------------------------------------------------------


class _Opaque:
    """A type the annotation names but the SDK does not import at run time."""


class _Names(Mapping[str, Any]):
    """Names an annotation string may use: the class's nested classes, its module, then `stripe`."""

    def __init__(self, *scopes: Mapping[str, Any]) -> None:
        self.scopes = scopes

    def __getitem__(self, name: str) -> Any:
        for scope in self.scopes:
            if name in scope:
                return scope[name]
        stripe = importlib.import_module("stripe")
        if hasattr(stripe, name):
            return getattr(stripe, name)
        for sub in ("checkout", "billing_portal", "params"):
            module = getattr(stripe, sub)
            if hasattr(module, name):
                return getattr(module, name)
        if hasattr(typing, name):
            return getattr(typing, name)
        if hasattr(__builtins__, name) if not isinstance(__builtins__, dict) else name in __builtins__:
            raise KeyError(name)  # a builtin: let eval find it
        return _Opaque  # a type the SDK imports only for type checkers: not checked

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def _sdk_class(dotted: str, params: bool) -> type:
    stripe = importlib.import_module("stripe")
    owner: Any = stripe.params if params else stripe
    for part in dotted.split("."):
        owner = getattr(owner, part)
    return typing.cast(type, owner)


def _evaluate(annotation: Any, names: _Names) -> Any:
    if isinstance(annotation, typing.ForwardRef):
        annotation = annotation.__forward_arg__
    if isinstance(annotation, str):
        return eval(annotation, {"__builtins__": __builtins__}, names)  # noqa: S307 - the SDK's own annotations
    return annotation


class _SdkConverter:
    """Type hints of the SDK → OpenAPI 3.0 schemas (nullable as OpenAPI spells it)."""

    def __init__(self) -> None:
        stripe = importlib.import_module("stripe")
        self.stripe = stripe
        self.resource_base = stripe.StripeObject
        self.list_object = stripe.ListObject
        self.untyped = importlib.import_module("stripe._stripe_object").UntypedStripeObject
        self.not_required = importlib.import_module("typing_extensions").NotRequired
        self.is_typeddict = importlib.import_module("typing_extensions").is_typeddict

    def params(self, cls: type) -> dict[str, Any]:
        """A TypedDict of request parameters (the RequestOptions keys are not parameters)."""
        options = set(importlib.import_module("stripe._request_options").RequestOptions.__annotations__)
        return self._typed_dict(cls, skip=options)

    def _typed_dict(self, cls: type, skip: set[str] = frozenset()) -> dict[str, Any]:  # type: ignore[assignment]
        module = sys.modules[cls.__module__]
        names = _Names(vars(module))
        properties: dict[str, Any] = {}
        required: list[str] = []
        for name, raw in cls.__annotations__.items():
            if name in skip:
                continue
            hint = _evaluate(raw, names)
            optional = name in getattr(cls, "__optional_keys__", ())
            if typing.get_origin(hint) is self.not_required:
                hint, optional = typing.get_args(hint)[0], True
            properties[name] = self._param(_evaluate(hint, names), names)
            if not optional:
                required.append(name)
        schema: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            schema["required"] = sorted(required)
        return schema

    def _param(self, hint: Any, names: _Names) -> dict[str, Any]:
        hint = _evaluate(hint, names)
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin is typing.Union or isinstance(hint, types.UnionType):
            options = [self._param(arg, names) for arg in args if arg is not type(None)]
            return options[0] if len(options) == 1 else {"anyOf": options}
        if origin is typing.Literal:
            return {"type": _json_type(args[0]), "enum": list(args)}
        if origin in (list, typing.List):  # noqa: UP006 - the SDK's spelling
            return {"type": "array", "items": self._param(args[0], names)}
        if origin in (dict, typing.Dict, Mapping):  # noqa: UP006
            return {"type": "object", "additionalProperties": self._param(args[1], names)}
        if isinstance(hint, type) and self.is_typeddict(hint):
            return self._typed_dict(hint)
        base = origin or hint
        if isinstance(base, type) and issubclass(base, self.untyped):
            return {"type": "object", "additionalProperties": self._param(args[0], names) if args else {}}
        if hint is typing.Any or hint is object or hint is _Opaque:
            return {}
        if isinstance(hint, type) and issubclass(hint, self.resource_base):  # an untyped object
            return {"type": "object"}
        return {"type": _json_type(hint)}

    def resource(self, cls: type, seen: tuple[type, ...] = ()) -> dict[str, Any]:
        """A resource class (or one of its nested classes) as an object schema."""
        names = _Names(vars(cls), *(vars(outer) for outer in seen[::-1]), vars(sys.modules[cls.__module__]))
        properties: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            for name, raw in (vars(klass).get("__annotations__") or {}).items():
                if name.startswith("_") or name.isupper() or typing.get_origin(raw) is typing.ClassVar:
                    continue
                if isinstance(raw, str) and raw.startswith("ClassVar"):
                    continue
                hint = _evaluate(raw, names)
                if typing.get_origin(hint) is typing.ClassVar:
                    continue
                properties[name] = self._field(hint, names, (*seen, cls))
        return {"type": "object", "properties": properties}

    def _field(self, hint: Any, names: _Names, seen: tuple[type, ...]) -> dict[str, Any]:
        hint = _evaluate(hint, names)
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin is typing.Union or isinstance(hint, types.UnionType):
            real = [arg for arg in args if arg is not type(None)]
            nullable = len(real) < len(args)
            literals = [a for a in real if typing.get_origin(_evaluate(a, names)) is typing.Literal]
            if literals and len(real) == 2 and str in real:  # Union[Literal[...], str]: widened
                schema: dict[str, Any] = {"type": "string"}
            elif len(real) == 2 and str in real:  # ExpandableField[X]: an id, or the object expanded
                other = next(a for a in real if a is not str)
                schema = {"anyOf": [{"type": "string"}, self._shallow(other, names, seen)]}
            elif len(real) == 1:
                schema = self._field(real[0], names, seen)
            else:
                schema = {"anyOf": [self._field(arg, names, seen) for arg in real]}
            return {**schema, "nullable": True} if nullable else schema
        if origin is typing.Literal:
            return {"type": _json_type(args[0]), "enum": list(args)}
        if origin in (list, typing.List):  # noqa: UP006
            return {"type": "array", "items": self._field(args[0], names, seen)}
        if origin in (dict, typing.Dict):  # noqa: UP006
            return {"type": "object", "additionalProperties": self._field(args[1], names, seen)}
        base = origin or hint
        if isinstance(base, type) and issubclass(base, self.list_object):
            return {
                "type": "object",
                "required": ["object", "data", "has_more"],
                "properties": {
                    "object": {"type": "string", "enum": ["list"]},
                    "data": {"type": "array", "items": {"type": "object"}},
                    "has_more": {"type": "boolean"},
                    "url": {"type": "string"},
                    "total_count": {"type": "integer"},
                },
            }
        if isinstance(base, type) and issubclass(base, self.untyped):
            inner = self._field(args[0], names, seen) if args else {}
            return {"type": "object", "additionalProperties": inner}
        if isinstance(base, type) and issubclass(base, self.resource_base):
            return self._shallow(base, names, seen)
        if hint is typing.Any or hint is object or hint is _Opaque:
            return {}
        return {"type": _json_type(hint)}

    def _shallow(self, cls: Any, names: _Names, seen: tuple[type, ...]) -> dict[str, Any]:
        """A nested class of the resource in full; another API resource as an unchecked object."""
        cls = _evaluate(cls, names)
        if not isinstance(cls, type) or cls is _Opaque:
            return {}
        if getattr(cls, "OBJECT_NAME", None) or cls in seen:
            return {"type": "object"}  # another resource (expandable): its own schema is elsewhere
        return self.resource(cls, seen)


def _json_type(value: Any) -> str:
    kind = value if isinstance(value, type) else type(value)
    if kind.__name__ == "Decimal":  # decimals travel as strings
        return "string"
    if kind is bool:
        return "boolean"
    if kind is int:
        return "integer"
    if kind is float:
        return "number"
    if kind is str:
        return "string"
    return "object"


def from_sdk() -> dict[str, Any]:
    """The subset built from the installed SDK's generated types."""
    stripe = importlib.import_module("stripe")
    doc = _document(stripe.api_version, f"stripe-python {stripe.VERSION} generated types")
    convert = _SdkConverter()
    components: dict[str, str] = {}
    for method, path, params, resource, component in ENDPOINTS:
        body = convert.params(_sdk_class(params, params=True))
        doc["paths"].setdefault(path, {})[method] = _operation(body, component)
        components[component] = resource
    components.update({"transfer": "Transfer"})
    for component, resource in sorted(components.items()):
        schema = convert.resource(_sdk_class(resource, params=False))
        schema["required"] = ["id", "object"] if "id" in schema["properties"] else ["object"]
        doc["components"]["schemas"][component] = schema
    return doc


def main(argv: list[str] | None = None) -> int:
    """Write the subset; print what it holds."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--spec", type=Path, help="Stripe's openapi/spec3.json")
    source.add_argument("--from-sdk", action="store_true", help="the installed stripe SDK's generated types")
    parser.add_argument("--depth", type=int, default=3, help="component reference depth kept (--spec)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    stripe = importlib.import_module("stripe")
    if args.spec:
        spec = json.loads(args.spec.read_text())
        if spec["info"]["version"] != stripe.api_version:
            print(
                f"warning: the spec is {spec['info']['version']}, the SDK sends {stripe.api_version}",
                file=sys.stderr,
            )
        doc = from_spec(spec, args.depth)
    else:
        doc = from_sdk()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    operations = sum(len(methods) for methods in doc["paths"].values())
    print(
        f"{args.out}: API {doc['info']['version']} from {doc['info']['x-source']}: "
        f"{operations} operations, {len(doc['components']['schemas'])} schemas"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
