"""A `Settings` split into what may be published and what must not (actors/deployment.py).

Which variables are secret is decided once, by `SECRET_VARIABLES` in config/settings.py; the
fields behind them (the provider keys nested in `providers`, the trace collector's export headers
nested in `tracing`) follow from the variables' names.
`public` blanks every secret field, `secret` keeps only them, and `joined` puts the two
halves back together: `joined(public(s), secret(s)) == s`.
"""

from __future__ import annotations

from typing import Any

from config.settings import SECRET_VARIABLES, Settings, variable_of

PROVIDER_KEY = "SVC_PROVIDER{letter}_API_KEY"
# The trace collector's credentials (OTEL_EXPORTER_OTLP_HEADERS, _TRACES_HEADERS; tracing, #33).
TRACE_HEADERS = "OTEL_EXPORTER_OTLP_HEADERS"


def secret_fields() -> tuple[str, ...]:
    """The top-level settings fields read from a secret variable."""
    return tuple(name for name in Settings.model_fields if variable_of(name) in SECRET_VARIABLES)


def public(settings: Settings) -> dict[str, Any]:
    """The settings as JSON with every secret left out (blank, as if unset)."""
    values = settings.model_dump(mode="json")
    for name in secret_fields():
        values[name] = Settings.model_fields[name].get_default(call_default_factory=True)
        if isinstance(values[name], tuple):
            values[name] = list(values[name])
    for name, provider in values["providers"].items():
        if PROVIDER_KEY.format(letter=name[-1]) in SECRET_VARIABLES:
            provider["api_key"] = None
    if TRACE_HEADERS in SECRET_VARIABLES:
        values["tracing"]["headers"] = []
    return values


def secret(settings: Settings) -> dict[str, Any]:
    """Only the secrets, as JSON: the secret fields and each provider's key."""
    values = settings.model_dump(mode="json")
    found = {name: values[name] for name in secret_fields()}
    found["providers"] = {name: provider["api_key"] for name, provider in values["providers"].items()}
    found["tracing"] = {"headers": values["tracing"]["headers"]}
    return found


def joined(published: dict[str, Any], secrets: dict[str, Any]) -> Settings:
    """Settings from a public half and a secret half."""
    values = {**published, **{k: v for k, v in secrets.items() if k not in {"providers", "tracing"}}}
    values["providers"] = {
        name: {**provider, "api_key": (secrets.get("providers") or {}).get(name)}
        for name, provider in published.get("providers", {}).items()
    }
    if "tracing" in published:
        headers = (secrets.get("tracing") or {}).get("headers") or []
        values["tracing"] = {**published["tracing"], "headers": headers}
    return Settings.model_validate(values)
