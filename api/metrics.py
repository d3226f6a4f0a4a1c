"""`GET /metrics` in the Prometheus text format, and the middleware that times every request.

Two kinds of metric (docs/operations.md):

- this process's own: HTTP requests by route template and status, their latency,
  rate-limit refusals. Kept in a registry per application (prometheus-client).
- the deployment's: what happens in Ray actors and the scheduler (runs, run
  duration, tokens, judge decisions, egress blocks, payment and mail failures,
  scheduler lag) is counted in MongoDB (`svc/core/metric_counters.py`) and read on
  scrape in one bounded query; queued runs and queued mail are counted by their
  owners (`svc.runtime.queued_runs`, `svc.core.queued_mail`) with queries that
  match only the queued records; live install actors come from one
  Ray control-plane call. These are cluster-wide: every API process reports the
  same values.

With SVC_METRICS_TOKEN set, a scrape must send `Authorization: Bearer <token>`
(401 otherwise). `svc serve` refuses to start on any address but a loopback one
without it (`open_to_network`): the metrics name routes, platforms and volumes, and
several API processes behind a proxy must share one token, so none is made up.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import time
from collections.abc import Iterator
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from actors.runtime import RayRuntime
from api.context import SERVICES, SETTINGS
from api.errors import error_response
from config.settings import Settings
from svc.core import Store, queued_mail, read_metrics
from svc.runtime import queued_runs

log = logging.getLogger(__name__)

PATH = "/metrics"
# generate_latest writes the classic text format; say so (the library's "latest" is 1.0.0).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

# Counters kept in MongoDB: stored name -> (exposed name, help). Histograms likewise.
STORED_COUNTERS = {
    "runs": ("svc_runs", "Runs recorded, by platform and final status."),
    "llm_tokens": ("svc_llm_tokens", "Tokens used by agent and judge model calls, by provider and kind."),
    "judge_decisions": ("svc_judge_decisions", "Decisions of the access-policy judge (allow or block)."),
    "egress_blocks": ("svc_egress_blocks", "Agent HTTP requests refused, by what refused them."),
    "mcp_tool_calls": ("svc_mcp_tool_calls", "Agents' MCP tool calls, by verdict and outcome (docs/mcp.md)."),
    "payment_failures": ("svc_payment_failures", "Failed charges (declined, or failed per provider event)."),
    "mail_failures": ("svc_mail_failures", "Failed mail delivery attempts (final: no retry left)."),
    "trace_spans_dropped": (
        "svc_trace_spans_dropped",
        "Spans lost before reaching the trace collector (queue full or export failed), by process kind.",
    ),
}
STORED_HISTOGRAMS = {
    "run_duration_seconds": ("svc_run_duration_seconds", "Duration of managed runs, start to finish."),
    "scheduler_lag_seconds": ("svc_scheduler_lag_seconds", "Delay from a schedule's due time to its fire."),
}


class HttpMetrics:
    """This process's request metrics, in a registry of its own (one per application)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "svc_http_requests",
            "HTTP requests, by method, route template and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "svc_http_request_duration_seconds",
            "Time to answer an HTTP request, by method and route template.",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.refusals = Counter(
            "svc_rate_limit_refusals",
            "Requests refused by a rate limit (429), by route template.",
            ["route"],
            registry=self.registry,
        )

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one answered request."""
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)
        if status == 429:
            self.refusals.labels(route).inc()


HTTP_METRICS = web.AppKey("http_metrics", HttpMetrics)


def route_template(request: web.Request) -> str:
    """The route's path template (`/api/installs/{installId}`), never the raw path: bounded labels."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


@web.middleware
async def measure(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Time the request and count its final status (outermost, so error bodies count too)."""
    started = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    finally:
        request.app[HTTP_METRICS].observe(
            request.method, route_template(request), status, time.perf_counter() - started
        )


def open_to_network(settings: Settings, listening: str) -> str | None:
    """Why `svc serve` must not start on the address `listening` (the bound socket's), or None:
    `/metrics` would answer anyone who reaches a non-loopback address without a token."""
    if settings.metrics_token is not None or ipaddress.ip_address(listening.split("%")[0]).is_loopback:
        return None
    return (
        f"SVC_METRICS_TOKEN is required when svc serve listens on {listening}, not a loopback address "
        "(GET /metrics would be open); set it to a random token, for example "
        "python3 -c 'import secrets; print(secrets.token_hex(32))', and scrape with it (docs/operations.md)"
    )


def setup(app: web.Application) -> None:
    """Add the middleware's registry and the `/metrics` route to an application."""
    app[HTTP_METRICS] = HttpMetrics()
    app.router.add_get(PATH, scrape)


async def scrape(request: web.Request) -> web.Response:
    """The metrics, after checking the scrape token when one is configured."""
    token = request.app[SETTINGS].metrics_token
    if token is not None:
        offered = request.headers.get("Authorization", "")
        expected = f"Bearer {token}"
        if not hmac.compare_digest(offered.encode(), expected.encode()):
            return error_response(401, "Metrics need Authorization: Bearer <SVC_METRICS_TOKEN>")
    services = request.app[SERVICES]
    families = await deployment_families(services.store, services.runtime)
    snapshot = CollectorRegistry()
    snapshot.register(_Snapshot(families))
    body = generate_latest(request.app[HTTP_METRICS].registry) + generate_latest(snapshot)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


class _Snapshot(Collector):
    """Families read from the database for one scrape."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


async def deployment_families(store: Store, runtime: Any) -> list[Metric]:
    """The deployment-wide metrics: stored counters and histograms, and three live gauges."""
    docs = await read_metrics(store)
    families: list[Metric] = []
    for stored, (name, help_text) in STORED_COUNTERS.items():
        rows = [doc for doc in docs if doc.get("name") == stored]
        keys = sorted({key for doc in rows for key in doc.get("labels", {})})
        family = CounterMetricFamily(name, help_text, labels=keys)
        for doc in rows:
            family.add_metric([str(doc["labels"].get(k, "")) for k in keys], float(doc.get("value", 0)))
        families.append(family)
    for stored, (name, help_text) in STORED_HISTOGRAMS.items():
        rows = [doc for doc in docs if doc.get("name") == stored]
        keys = sorted({key for doc in rows for key in doc.get("labels", {})})
        histogram = HistogramMetricFamily(name, help_text, labels=keys)
        for doc in rows:
            histogram.add_metric(
                [str(doc["labels"].get(k, "")) for k in keys], _cumulative(doc), float(doc.get("sum", 0.0))
            )
        families.append(histogram)

    runs = await queued_runs(store)
    families.append(GaugeMetricFamily("svc_runs_queued", "Managed runs waiting to start.", runs))
    mail = await queued_mail(store)
    families.append(
        GaugeMetricFamily("svc_mail_queued", "Mail waiting for delivery or a retry (outbox).", mail)
    )
    actors = GaugeMetricFamily("svc_install_actors_active", "Install actors alive in the Ray cluster.")
    if isinstance(runtime, RayRuntime):
        try:
            actors.add_metric([], await runtime.active_actors())
        except Exception as exc:  # Ray unreachable: the gauge is left out, the scrape still answers
            log.warning("could not count install actors: %s", type(exc).__name__)
    families.append(actors)
    return families


def _cumulative(doc: dict[str, Any]) -> list[tuple[str, float]]:
    """Prometheus buckets (`le`, cumulative count) from a stored histogram document."""
    bounds = list(doc.get("bounds") or [])
    stored = doc.get("buckets") or {}
    out: list[tuple[str, float]] = []
    running = 0.0
    for index, bound in enumerate(bounds):
        running += float(stored.get(str(index), 0))
        out.append((repr(float(bound)), running))
    running += float(stored.get(str(len(bounds)), 0))
    out.append(("+Inf", running))
    return out
