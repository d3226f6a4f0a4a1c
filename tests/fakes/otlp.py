"""A local OTLP/HTTP trace receiver: what a collector (or Phoenix, Jaeger, Tempo) is to the service.

    collector = Collector()
    server = await aiohttp_server(collector.app())
    endpoint = collector.url(server)          # OTEL_EXPORTER_OTLP_ENDPOINT
    collector.answer = 503                    # refuse exports from now on (a collector in trouble)
    spans = collector.trace(trace_id)         # every span received of one trace

It decodes each `POST /v1/traces` body (protobuf `ExportTraceServiceRequest`, the exporter's wire
format) with the OpenTelemetry proto package, so what a test reads is exactly what left the
service, from whichever process sent it. The headers of every export are kept (`headers`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


def value_of(value: AnyValue) -> Any:
    """A proto attribute value as a Python value."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(v) for v in value.array_value.values]
    if kind is None:
        return None
    return getattr(value, kind)


@dataclass
class Span:
    """One received span, decoded."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    kind: str
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    links: list[tuple[str, str]]
    status: int  # 0 unset, 1 ok, 2 error
    resource: dict[str, Any]
    schema_url: str


@dataclass
class Collector:
    """Receives traces; `answer` other than 200 makes it refuse (the spans are not kept)."""

    spans: list[Span] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    answer: int = 200

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/traces", self._receive)
        return app

    @staticmethod
    def url(server: TestServer) -> str:
        """The receiver's root (OTEL_EXPORTER_OTLP_ENDPOINT)."""
        return str(server.make_url("")).rstrip("/")

    async def _receive(self, request: web.Request) -> web.Response:
        self.headers.append(dict(request.headers))
        if self.answer != 200:
            return web.Response(status=self.answer, text="collector unavailable")
        export = ExportTraceServiceRequest()
        export.ParseFromString(await request.read())
        for resource_spans in export.resource_spans:
            resource = {a.key: value_of(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        Span(
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex() or None,
                            name=span.name,
                            kind=KINDS.get(span.kind, str(span.kind)),
                            attributes={a.key: value_of(a.value) for a in span.attributes},
                            events=[
                                (e.name, {a.key: value_of(a.value) for a in e.attributes})
                                for e in span.events
                            ],
                            links=[(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
                            status=span.status.code,
                            resource=resource,
                            schema_url=scope_spans.schema_url,
                        )
                    )
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf"
        )

    def trace(self, trace_id: str) -> list[Span]:
        """The spans received of one trace."""
        return [span for span in self.spans if span.trace_id == trace_id]

    def named(self, prefix: str, trace_id: str | None = None) -> list[Span]:
        """The spans whose name starts with `prefix` (of one trace, when given)."""
        return [s for s in self.spans if s.name.startswith(prefix) and trace_id in (None, s.trace_id)]
