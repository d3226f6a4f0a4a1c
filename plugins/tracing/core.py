"""The tracer's state, the span handle, masking, and the context that crosses processes.

`plugins.tracing` re-exports what callers use; this module holds what every span helper shares:
whether tracing is on in this process (`STATE`, set by `plugins.tracing.sdk.setup`), the `Handle`
a helper yields, `masked` (the run's secrets cut out of recorded strings), W3C trace context in and
out (`carrier`, `attached`, `trace_id_of`), and the spans around the service's own seams: the HTTP
request (`server_span`), the command sent to an install's actor (`handover_span`), a schedule's
fire (`schedule_fire`) and an outbound request through the egress guard (`client_span`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

SEMCONV_VERSION = "1.41.0"
SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
SCOPE = "svc"
# gen_ai.provider.name by the wire format each catalogue provider speaks (docs/models.md).
PROVIDER_NAMES = {"providerA": "anthropic", "providerB": "openai", "providerC": "gcp.gemini"}
# svc.policy.outcome: what became of a request or tool call the access policy looked at.
OUTCOMES = (
    "allowed",
    "denied",
    "reported",  # report mode: it would have been denied, and went ahead
    "approval_requested",
    "approval_granted",
    "approval_refused",
    "unknown",  # the outcome was not recorded (a worker stopped mid-call)
)
MAX_CONTENT_CHARS = 32_000
MIN_SECRET_CHARS = 4  # shorter values are not masked: they would mask every word they appear in
SECRET_MASK = "***"
PROPAGATOR = TraceContextTextMapPropagator()
P = ParamSpec("P")
T = TypeVar("T")


@dataclass
class _State:
    """What `plugins.tracing_sdk.setup` installed in this process."""

    tracer: trace.Tracer
    on: bool = False
    capture: bool = False


NOOP_TRACER = trace.NoOpTracer()
STATE = _State(NOOP_TRACER)
# The run's secrets (masked wherever user data is recorded) and what a model call is made for.
SECRETS: ContextVar[tuple[str, ...]] = ContextVar("svc_trace_secrets", default=())
PURPOSE: ContextVar[str | None] = ContextVar("svc_trace_purpose", default=None)
# The run span of this task, for what is known only deep inside the run (gates, billing).
RUN: ContextVar[trace.Span | None] = ContextVar("svc_trace_run", default=None)


def enabled() -> bool:
    """Whether spans are recorded in this process."""
    return STATE.on


class Handle:
    """What a helper yields: the span, or nothing when tracing is off or the span not sampled."""

    __slots__ = ("span",)

    def __init__(self, span: trace.Span | None) -> None:
        self.span = span if span is not None and span.is_recording() else None

    def set(self, attributes: Mapping[str, Any]) -> None:
        """Set attributes (None values are left out)."""
        if self.span is not None:
            self.span.set_attributes({k: v for k, v in attributes.items() if v is not None})

    def event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        """Add a span event."""
        if self.span is not None:
            self.span.add_event(name, {k: v for k, v in (attributes or {}).items() if v is not None})

    def fail(self, error_type: str, description: str | None = None) -> None:
        """Mark the span failed with a low-cardinality `error.type`."""
        if self.span is not None:
            self.span.set_attribute("error.type", error_type)
            self.span.set_status(Status(StatusCode.ERROR, masked(description) if description else None))

    def status_code(self, code: int, server: bool = False) -> None:
        """An HTTP answer's status; 5xx (and 4xx for a client) fail the span."""
        self.set({"http.response.status_code": code})
        if code >= 500 or (code >= 400 and not server):
            self.fail(str(code))

    def content(self, name: str, value: Any) -> None:
        """A content attribute (prompt, completion, tool arguments): only with capture on, masked."""
        if self.span is not None and STATE.capture:
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            self.span.set_attribute(name, masked(text)[:MAX_CONTENT_CHARS])


OFF = Handle(None)


class _Off:
    """The context manager every span helper returns while tracing is off: entering it yields
    `value`, no generator is made, so a helper costs a flag test and a call."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __enter__(self) -> Any:
        return self.value

    def __exit__(self, *exc: object) -> None:
        return None


OFF_SPAN = _Off(OFF)
OFF_CARRIER = _Off({})


def when_on(off: _Off) -> Callable[[Callable[P, Iterator[T]]], Callable[P, AbstractContextManager[T]]]:
    """A span helper (a generator) that is `off` while tracing is off in this process."""

    def wrap(helper: Callable[P, Iterator[T]]) -> Callable[P, AbstractContextManager[T]]:
        managed = contextmanager(helper)

        @functools.wraps(helper)
        def choose(*args: P.args, **kwargs: P.kwargs) -> AbstractContextManager[T]:
            return managed(*args, **kwargs) if STATE.on else off

        return choose

    return wrap


def masked(text: str) -> str:
    """The text with every secret of the current run replaced by `***`."""
    for secret in SECRETS.get():
        text = text.replace(secret, SECRET_MASK)
    return text


@contextmanager
def start(
    name: str,
    kind: SpanKind,
    attributes: Mapping[str, Any],
    parent: otel_context.Context | None = None,
    links: Sequence[Link] = (),
    pauses: tuple[type[BaseException], ...] = (),
) -> Iterator[Handle]:
    """A current span; an exception leaving it marks it failed (its type, never its message),
    except one of `pauses`: the work stopped at a gate its message names and goes on after it (a
    `svc.gate.reached` event, no error)."""
    attrs = {k: v for k, v in attributes.items() if v is not None}
    with STATE.tracer.start_as_current_span(
        name,
        context=parent,
        kind=kind,
        attributes=attrs,
        links=links,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        handle = Handle(span)
        try:
            yield handle
        except pauses as exc:
            handle.event("svc.gate.reached", {"svc.gate.name": str(exc)})
            raise
        except BaseException as exc:
            handle.fail(type(exc).__name__)
            raise


# ---- context across processes -----------------------------------------------------------------


def carrier() -> dict[str, str]:
    """The current trace context as W3C headers (`traceparent`, `tracestate`); {} when off or none."""
    if not STATE.on:
        return {}
    headers: dict[str, str] = {}
    PROPAGATOR.inject(headers)
    return headers


def context_fields() -> dict[str, Any]:
    """`{"trace": carrier}` to store on a record whose later work joins this trace; {} when none."""
    found = carrier()
    return {"trace": found} if found else {}


@when_on(OFF_SPAN)
def attached(headers: Mapping[str, str] | None) -> Iterator[None]:
    """Make a stored or received trace context current (a malformed one is ignored: a new trace)."""
    if not headers:
        yield
        return
    token = otel_context.attach(PROPAGATOR.extract(headers))
    try:
        yield
    finally:
        otel_context.detach(token)


def context_of(headers: Mapping[str, str] | None) -> trace.SpanContext | None:
    """The span context W3C headers name, or None (absent or malformed)."""
    if not headers:
        return None
    found = trace.get_current_span(PROPAGATOR.extract(headers)).get_span_context()
    return found if found.is_valid else None


def trace_id_of(headers: Mapping[str, str] | None) -> str | None:
    """The 32-hex trace id of a stored context, when it was sampled (exported); else None."""
    found = context_of(headers)
    return f"{found.trace_id:032x}" if found is not None and found.trace_flags.sampled else None


def detail_fields(headers: Mapping[str, str] | None, viewer_url: str | None) -> dict[str, str | None]:
    """The run detail's `traceId` and `traceUrl` (SVC_TRACE_URL with the id filled in)."""
    trace_id = trace_id_of(headers)
    link = viewer_url.replace("{traceId}", trace_id) if viewer_url and trace_id else None
    return {"traceId": trace_id, "traceUrl": link}


# ---- the request, the hand-over, the schedule ---------------------------------------------------


@when_on(OFF_SPAN)
def server_span(
    method: str, route: str | None, path: str, scheme: str, headers: Mapping[str, str]
) -> Iterator[Handle]:
    """An HTTP request to the API; a valid incoming `traceparent` makes it a child of the caller's
    trace (a malformed one is ignored). `path` must already have its credentials cut out."""
    attributes = {
        "http.request.method": method,
        "http.route": route,
        "url.path": path,
        "url.scheme": scheme,
    }
    parent = PROPAGATOR.extract(
        {"traceparent": headers.get("traceparent", ""), "tracestate": headers.get("tracestate", "")}
    )
    with start(f"{method} {route}" if route else method, SpanKind.SERVER, attributes, parent) as span:
        yield span


@when_on(OFF_CARRIER)
def handover_span(method: str, install_id: str) -> Iterator[dict[str, str]]:
    """A command sent to an install's actor over Ray, within a trace; yields the carrier to send
    with it ({} outside a trace: the actor's run then joins the context stored on the run)."""
    if not trace.get_current_span().get_span_context().is_valid:
        yield {}
        return
    attributes = {
        "rpc.system": "ray",
        "rpc.service": "InstallActor",
        "rpc.method": method,
        "svc.install.id": install_id,
    }
    with start(f"InstallActor/{method}", SpanKind.CLIENT, attributes):
        yield carrier()


@when_on(OFF_SPAN)
def schedule_fire(install_id: str, scheduled_for: str, manual: bool) -> Iterator[Handle]:
    """A schedule firing a run (the trace of a scheduled run starts here)."""
    attributes = {
        "svc.install.id": install_id,
        "svc.schedule.due": scheduled_for,
        "svc.schedule.manual": manual,
    }
    with start("schedule fire", SpanKind.INTERNAL, attributes) as span:
        yield span


# ---- outbound HTTP (the egress guard) -----------------------------------------------------------


@when_on(OFF_SPAN)
def client_span(
    method: str, scheme: str, host: str, port: int | None, path: str, headers: MutableMapping[str, str]
) -> Iterator[Handle]:
    """An outbound HTTP request, inside a trace only; `traceparent` is put on `headers` so the
    receiver joins the trace. The URL is recorded masked, without its query."""
    parent = trace.get_current_span().get_span_context()
    if not parent.is_valid:
        yield OFF
        return
    if not parent.trace_flags.sampled:  # pass the caller's decision on, record nothing
        PROPAGATOR.inject(headers)
        yield OFF
        return
    address = masked(host)
    default = 443 if scheme == "https" else 80
    attributes = {
        "http.request.method": method,
        "server.address": address,
        "server.port": port or default,
        "url.full": f"{scheme}://{address}{'' if port in (None, default) else f':{port}'}{masked(path)}",
    }
    with start(method, SpanKind.CLIENT, attributes) as span:
        PROPAGATOR.inject(headers)
        yield span
