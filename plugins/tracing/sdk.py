"""The OpenTelemetry SDK of one process: set up once per process kind, counted when spans are lost.

`stop = setup(settings, process)` is called where each kind of process starts: the API (api/app.py), an
install's actor and the scheduler actor (actors/). With an endpoint it installs a tracer provider
whose resource names the service, the process kind (`svc.process.kind`: api, install_actor,
scheduler), the host and the Ray node, a sampler from OTEL_TRACES_SAMPLER(_ARG), and a batch
processor exporting OTLP over HTTP on its own thread: ending a span only appends it to a bounded
queue, so a slow, failing or absent collector never blocks or fails a run. A span that cannot be
queued (the queue is full) or whose export failed is *dropped* and counted: `dropped()` for this
process, and `on_dropped(n)` (the deployment's `svc_trace_spans_dropped_total` in /metrics).

Without an endpoint nothing is installed and `plugins.tracing` stays a no-op.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import logging
import os
import socket
import threading
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider, sampling
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from config.tracing import TraceSettings
from plugins.tracing import core as tracing

__all__ = ["PROCESS_KINDS", "dropped", "flush", "setup"]

log = logging.getLogger(__name__)

PROCESS_KINDS = ("api", "install_actor", "scheduler", "cli")
MAX_QUEUE = 2048
BATCH = 512
SCHEDULE_DELAY_MS = 1000  # a span reaches the collector about a second after it ends
EXPORT_TIMEOUT_S = 10.0
SHUTDOWN_MS = 3000  # the longest a process's stop waits for its last spans to leave
Report = Callable[[int], Coroutine[Any, Any, None]]


@dataclass
class _Installed:
    settings: TraceSettings
    process: str
    provider: TracerProvider
    users: int = 1
    stopped: bool = False


_LOCK = threading.Lock()
_installed: _Installed | None = None
_dropped = 0
_reports: set[asyncio.Task[None]] = set()


def dropped() -> int:
    """Spans this process lost since it started (queue full or export failed)."""
    return _dropped


def _count(n: int, report: Report | None, loop: asyncio.AbstractEventLoop | None) -> None:
    """Count lost spans here, and report them to the deployment's counter on the event loop."""
    global _dropped
    with _LOCK:
        first = _dropped == 0
        _dropped += n
    if first:  # then counted, not logged: a dead collector must not flood the log
        log.warning("trace spans are being dropped (svc_trace_spans_dropped_total counts them)")
    if report is None or loop is None or loop.is_closed():
        return

    def start() -> None:
        task = loop.create_task(report(n))
        _reports.add(task)
        task.add_done_callback(_reports.discard)

    try:
        loop.call_soon_threadsafe(start)
    except RuntimeError:  # the loop closed meanwhile: the local count stands
        pass


class _CountingExporter(SpanExporter):
    """The exporter, with every span of a failed export counted as dropped."""

    def __init__(self, inner: SpanExporter, lost: Callable[[int], None]) -> None:
        self.inner = inner
        self.lost = lost

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception as exc:  # an exporter bug must not kill the export thread
            log.warning("span export raised %s", type(exc).__name__)
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self.lost(len(spans))
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class _BoundedBatch(BatchSpanProcessor):
    """The SDK's batch processor, counting the spans it drops because its queue is full, and
    with a bounded shut-down (the SDK's waits up to 30 s for a collector that does not answer)."""

    def __init__(self, exporter: SpanExporter, lost: Callable[[int], None]) -> None:
        super().__init__(
            exporter,
            max_queue_size=MAX_QUEUE,
            schedule_delay_millis=SCHEDULE_DELAY_MS,
            max_export_batch_size=BATCH,
        )
        self.lost = lost

    def on_end(self, span: ReadableSpan) -> None:
        queue: Any = getattr(self._batch_processor, "_queue", ())  # the SDK's deque (pinned version)
        if span.context is not None and span.context.trace_flags.sampled and len(queue) >= MAX_QUEUE:
            self.lost(1)  # the SDK drops the oldest queued span to make room
        super().on_end(span)

    def shutdown(self) -> None:
        self._batch_processor.shutdown(timeout_millis=SHUTDOWN_MS)


def _sampler(settings: TraceSettings) -> sampling.Sampler:
    ratio = sampling.TraceIdRatioBased(settings.sampler_arg)
    return {
        "always_on": sampling.ALWAYS_ON,
        "always_off": sampling.ALWAYS_OFF,
        "traceidratio": ratio,
        "parentbased_always_on": sampling.ParentBased(sampling.ALWAYS_ON),
        "parentbased_always_off": sampling.ParentBased(sampling.ALWAYS_OFF),
        "parentbased_traceidratio": sampling.ParentBased(ratio),
    }[settings.sampler]


def _resource(settings: TraceSettings, process: str, node: str | None) -> Resource:
    """OTEL_RESOURCE_ATTRIBUTES, then what this process is (the service name from OTEL_SERVICE_NAME wins)."""
    try:
        version = metadata.version("svc-registry")
    except metadata.PackageNotFoundError:
        version = "unknown"
    attributes: dict[str, Any] = dict(settings.resource)
    attributes.update(
        {
            "service.name": settings.service_name,
            "service.version": version,
            "svc.process.kind": process,
            "host.name": socket.gethostname(),
            "process.pid": os.getpid(),
        }
    )
    if node:
        attributes["svc.ray.node_id"] = node
    return Resource(attributes)


def setup(
    settings: TraceSettings,
    process: str,
    *,
    node: str | None = None,
    on_dropped: Report | None = None,
    exporter: SpanExporter | None = None,
) -> Callable[[], None]:
    """Install this process's tracing; the function that undoes it (blocking: it flushes the last
    spans, bounded by SHUTDOWN_MS; call it in a thread from async code). Nothing is installed, and
    the function does nothing, without an endpoint. Equal settings share one installation, stopped
    when its last user stops; other settings replace it. The installation is also flushed when the
    process exits.

    `exporter` replaces the OTLP exporter (tests: the SDK's in-memory exporter, spans exported at
    once)."""
    global _installed
    if not settings.enabled and exporter is None:
        return _nothing
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    with _LOCK:
        current = _installed
        if (
            current is not None
            and (current.settings, current.process) == (settings, process)
            and not exporter
        ):
            current.users += 1
            return functools.partial(_release, current)
    if current is not None:
        _stop(current)

    def lost(n: int) -> None:
        _count(n, on_dropped, loop)

    try:
        provider = _provider(settings, process, node, exporter, lost)
    except Exception as exc:  # tracing must never keep a process (or a run) from working
        log.warning("traces are off in this process: set-up failed (%s)", type(exc).__name__)
        return _nothing
    # The SDK logs every span its full queue drops, and the exporter every retry of a batch: a
    # collector that is down would flood the log. Lost spans are counted instead (`_count`).
    logging.getLogger("opentelemetry.sdk._shared_internal").setLevel(logging.ERROR)
    logging.getLogger("opentelemetry.exporter").setLevel(logging.ERROR)
    installed = _Installed(settings, process, provider)
    with _LOCK:
        _installed = installed
        tracing.STATE.tracer = provider.get_tracer(tracing.SCOPE, schema_url=tracing.SCHEMA_URL)
        tracing.STATE.capture = settings.capture_content
        tracing.STATE.on = True
    atexit.register(_stop, installed)
    log.info("traces export to %s as %s (%s)", _shown(settings.endpoint), settings.service_name, process)
    return functools.partial(_release, installed)


def _provider(
    settings: TraceSettings,
    process: str,
    node: str | None,
    exporter: SpanExporter | None,
    lost: Callable[[int], None],
) -> TracerProvider:
    """The tracer provider: resource, sampler, and the batch (or the test exporter's) processor."""
    provider = TracerProvider(
        resource=_resource(settings, process, node), sampler=_sampler(settings), shutdown_on_exit=False
    )
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(_CountingExporter(exporter, lost)))
        return provider
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    otlp = OTLPSpanExporter(
        endpoint=settings.endpoint, headers=dict(settings.headers), timeout=EXPORT_TIMEOUT_S
    )
    provider.add_span_processor(_BoundedBatch(_CountingExporter(otlp, lost), lost))
    return provider


def flush() -> None:
    """Export what this process has queued now (blocking; the bench and tests)."""
    current = _installed
    if current is not None:
        current.provider.force_flush()


def _nothing() -> None:
    """What undoes a set-up that installed nothing."""


def _shown(endpoint: str | None) -> str:
    """The endpoint without credentials, for the log."""
    if not endpoint:
        return "a test exporter"
    scheme, _, rest = endpoint.partition("://")
    return f"{scheme}://{rest.rsplit('@', 1)[-1]}"


def _stop(installed: _Installed) -> None:
    """Turn tracing off here (when `installed` is still current) and send what it queued."""
    global _installed
    with _LOCK:
        if installed.stopped:
            return
        installed.stopped = True
        if _installed is installed:
            _installed = None
            tracing.STATE.on = False
            tracing.STATE.capture = False
            tracing.STATE.tracer = tracing.NOOP_TRACER
    installed.provider.shutdown()


def _release(installed: _Installed) -> None:
    """One user of `installed` is done; the last one stops it."""
    with _LOCK:
        installed.users -= 1
        last = installed.users <= 0
    if last:
        _stop(installed)
