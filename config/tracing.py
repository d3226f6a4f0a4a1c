"""The trace settings: the standard OpenTelemetry variables plus the service's two, parsed once.

The service honours the ecosystem's own variables (OTEL_EXPORTER_OTLP_ENDPOINT and the others in
`VARIABLES`), so an operator's existing collector configuration works unchanged; it reads them
into `TraceSettings` here, at start-up, instead of letting the SDK read the process environment
later: a bad value stops start-up with one line naming the variable (config/settings.py), and the
install and scheduler actors, which run on other nodes with another environment, get the same
values through the deployment's published settings (actors/deployment.py).

With no endpoint, tracing is off: nothing is exported and the helpers of `plugins.tracing` cost a
flag test (docs/observability.md, "Traces").
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from pydantic import BaseModel, ConfigDict, Field

# OTEL_TRACES_SAMPLER values the SDK implements without extra packages (the spec's list less the
# remote samplers: jaeger_remote, xray).
SAMPLERS = (
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)
PROTOCOL = "http/protobuf"
TRACES_PATH = "/v1/traces"
# A header name is an RFC 9110 token.
TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")

# (variable, accepted form), in the order of docs/settings.md.
VARIABLES: tuple[tuple[str, str], ...] = (
    (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "an http(s) URL of an OTLP/HTTP receiver; traces go to `<url>/v1/traces`",
    ),
    ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "the full http(s) URL traces are posted to (wins over the above)"),
    ("OTEL_EXPORTER_OTLP_HEADERS", "comma-separated `name=value` pairs, values URL-encoded"),
    (
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "comma-separated `name=value` pairs (added to, and winning over, the above)",
    ),
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "`http/protobuf` (the only protocol this service exports with)"),
    ("OTEL_SERVICE_NAME", "a service name, e.g. `svc-prod`"),
    ("OTEL_RESOURCE_ATTRIBUTES", "comma-separated `key=value` pairs, values URL-encoded"),
    ("OTEL_TRACES_SAMPLER", "one of " + ", ".join(f"`{name}`" for name in SAMPLERS)),
    ("OTEL_TRACES_SAMPLER_ARG", "a ratio from 0 to 1 (for the traceidratio samplers)"),
    ("OTEL_SDK_DISABLED", "`true` or `false`"),
    ("SVC_TRACE_CONTENT", "`on` or `off`: record prompts, completions and tool arguments in spans"),
    ("SVC_TRACE_URL", "an http(s) URL template with `{traceId}`, e.g. `https://phoenix.example.com/...`"),
)
# Values an error message never shows (collector credentials travel in the headers).
SECRET = frozenset({"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"})


class TraceSettings(BaseModel):
    """Where and what to export; `endpoint` None means tracing is off."""

    model_config = ConfigDict(frozen=True)

    endpoint: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    service_name: str = "svc"
    resource: tuple[tuple[str, str], ...] = ()
    sampler: str = "parentbased_always_on"
    sampler_arg: float = Field(default=1.0, ge=0.0, le=1.0)
    capture_content: bool = False
    # The trace viewer's URL template (`{traceId}`), for the run detail's link.
    viewer_url: str | None = None

    @property
    def enabled(self) -> bool:
        """Whether spans are recorded and exported at all."""
        return self.endpoint is not None


def parse_endpoint(raw: str) -> str:
    """An absolute http(s) URL with a host."""
    parts = urlsplit(raw)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ValueError("not an absolute http:// or https:// URL")
    try:
        parts.port  # noqa: B018 - raises ValueError on a port out of range
    except ValueError:
        raise ValueError("the port is not a number from 1 to 65535") from None
    return raw


def traces_url(base: str) -> str:
    """OTEL_EXPORTER_OTLP_ENDPOINT is the receiver's root: traces are posted under /v1/traces."""
    return base.rstrip("/") + TRACES_PATH


def parse_pairs(raw: str) -> tuple[tuple[str, str], ...]:
    """`name=value,name2=value2` (W3C baggage-like; values percent-decoded), names as tokens."""
    pairs = []
    for item in raw.split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError("an entry is not `name=value`")
        if not set(name) <= TOKEN_CHARS:
            raise ValueError("a name holds a character a header or attribute name cannot")
        pairs.append((name, unquote(value.strip())))
    return tuple(pairs)


def parse_protocol(raw: str) -> str:
    """Only OTLP over HTTP with protobuf bodies."""
    if raw.strip() != PROTOCOL:
        raise ValueError(f"this service exports with {PROTOCOL} only")
    return PROTOCOL


def parse_sampler(raw: str) -> str:
    """One of the samplers the SDK implements here."""
    if raw.strip().lower() not in SAMPLERS:
        raise ValueError("not a sampler this service knows")
    return raw.strip().lower()


def parse_ratio(raw: str) -> float:
    """A number from 0 to 1."""
    try:
        ratio = float(raw)
    except ValueError:
        raise ValueError("not a number") from None
    if not 0.0 <= ratio <= 1.0:
        raise ValueError("not between 0 and 1")
    return ratio


def parse_viewer_url(raw: str) -> str:
    """An http(s) URL template naming `{traceId}`."""
    parse_endpoint(raw.replace("{traceId}", "0"))
    if "{traceId}" not in raw:
        raise ValueError("the template has no `{traceId}`")
    return raw


# Values whose password part an error message hides.
URLS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
