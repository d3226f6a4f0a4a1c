"""docs/operations.md matches what the code emits: every alert's metrics, labels and route
values exist, every metric is in the table with every label value the code writes, and the
scrape configuration names the compose service.

What the code emits is found, not listed by hand: the calls that count a deployment metric
(`count_metric(store, "name", {labels})` and its siblings) are read from the source, each is
written once into the test's database, and the real scrape code (`deployment_families`, the
HTTP registry) renders them in the exposition format, which is parsed back.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from api.app import ROUTES, create_app
from api.metrics import STORED_COUNTERS, STORED_HISTOGRAMS, HttpMetrics, _Snapshot, deployment_families
from api.schemas.common import EventStream
from config.settings import Settings
from svc.core import DURATION_BUCKETS, count_metric, observe_metric
from tests.support.source import parse

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "operations.md"
CODE_DIRS = ("svc", "actors", "api", "plugins")
COUNTING = {"inc": 1, "observe": 1, "increment": 0, "observation": 0}  # the name's argument index
# The same functions as other packages call them, through svc.core's surface.
SURFACE = {"count_metric": "inc", "observe_metric": "observe", "counter_increment": "increment"}
SURFACE["histogram_observation"] = "observation"
MATCHER = re.compile(r'\s*([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')


@dataclass
class Counted:
    """One deployment metric as the code writes it: its label names and the values known statically."""

    histogram: bool
    labels: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))


def constant_values(node: ast.expr) -> set[str]:
    """The string values an expression can take when it is a constant or a choice of constants."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return constant_values(node.body) | constant_values(node.orelse)
    return set()


def counting_call(node: ast.AST) -> str | None:
    """Which counting function a call is (`metric_counters.inc(...)` or `count_metric(...)`)."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Name):
        return SURFACE.get(func.id)
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        if func.value.id == "metric_counters" and func.attr in COUNTING:
            return func.attr
    return None


@cache
def counted_in_code() -> dict[str, Counted]:
    """Every deployment metric the code counts (stored name), from the calls in the source."""
    found: dict[str, Counted] = {}
    for folder in CODE_DIRS:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(parse(path.read_text())):
                kind = counting_call(node)
                if kind is None:
                    continue
                at = COUNTING[kind]
                name, labels = node.args[at], node.args[at + 1]
                assert isinstance(name, ast.Constant) and isinstance(labels, ast.Dict), (
                    f"{path}:{node.lineno}: count with a literal name and a literal label dict"
                )
                entry = found.setdefault(name.value, Counted(kind in ("observe", "observation")))
                for key, value in zip(labels.keys, labels.values, strict=True):
                    assert isinstance(key, ast.Constant)
                    entry.labels[key.value] |= constant_values(value)
    return found


async def exposed(store) -> tuple[dict[str, set[str]], set[str]]:
    """What a scrape shows: every sample name (with `_total`, `_bucket`, ...) and its label names,
    and every family as docs name it (counters with `_total`). Each counted metric is written
    once, then rendered by the scrape's own code."""
    for stored, entry in counted_in_code().items():
        labels = {key: sorted(values)[0] if values else "x" for key, values in entry.labels.items()}
        if entry.histogram:
            await observe_metric(store, stored, labels, [1.0], DURATION_BUCKETS)
        else:
            await count_metric(store, stored, labels)
    http = HttpMetrics()
    http.observe("GET", "/api/health", 429, 0.01)
    snapshot = CollectorRegistry()
    snapshot.register(_Snapshot(await deployment_families(store, None)))
    text = (generate_latest(http.registry) + generate_latest(snapshot)).decode()
    samples: dict[str, set[str]] = defaultdict(set)
    families = set()
    for family in text_string_to_metric_families(text):
        if family.name.endswith("_created"):
            continue  # prometheus-client's series creation times, beside each counter and histogram
        families.add(f"{family.name}_total" if family.type == "counter" else family.name)
        samples.setdefault(family.name, set())  # a gauge left without a sample (no Ray here)
        for sample in family.samples:
            samples[sample.name] |= set(sample.labels)
    return dict(samples), families


@cache
def route_templates() -> frozenset[str]:
    """Every route label value: the app's route templates (API, dashboard, docs), and `unmatched`."""
    app = create_app(Settings.from_env({}))
    return frozenset({resource.canonical for resource in app.router.resources()} | {"unmatched"})


def alert_rows() -> list[tuple[str, str]]:
    """(alert, expression cell) of the "Suggested alerts" table."""
    section = DOC.read_text().split("### Suggested alerts", 1)[1].split("\n### ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if len(cells) == 3 and "`" in cells[1]:
            rows.append((cells[0], cells[1].replace("\\|", "|")))  # a pipe in a table cell is `\|`
    assert len(rows) >= 10, rows
    return rows


def selectors(promql: str) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """Each `svc_*` metric of an expression and its label matchers (quoted values may hold braces)."""
    found = []
    for match in re.finditer(r"\b(svc_\w+)", promql):
        position, matchers = match.end(), []
        if promql.startswith("{", position):
            position += 1
            while not promql.startswith("}", position):
                matcher = MATCHER.match(promql, position)
                assert matcher, f"cannot read the matchers of {promql[match.start() :]!r}"
                matchers.append(matcher.groups())
                position = matcher.end()
        found.append((match.group(1), matchers))
    return found


def alternatives(regex: str) -> list[str]:
    """A regex with one alternation group, as one regex per alternative (or itself)."""
    group = re.search(r"\(([^()]*\|[^()]*)\)", regex)
    if group is None:
        return [regex]
    return [regex[: group.start()] + part + regex[group.end() :] for part in group.group(1).split("|")]


def metrics_table() -> dict[str, str]:
    """`svc_*` name -> its row in "The metrics" table."""
    section = DOC.read_text().split("### The metrics", 1)[1].split("\n### ", 1)[0]
    return {
        match.group(1): line for line in section.splitlines() if (match := re.match(r"\| `(svc_\w+)`", line))
    }


async def test_every_alert_uses_metrics_labels_and_routes_that_exist(store):
    samples, _ = await exposed(store)
    routes = route_templates()
    known = {
        name: entry.labels for name, entry in counted_in_code().items() if name in STORED_COUNTERS
    }  # statically known label values, by stored name
    exposed_values = {f"{STORED_COUNTERS[name][0]}_total": labels for name, labels in known.items()}
    problems = []
    for alert, cell in alert_rows():
        for promql in re.findall(r"`([^`]+)`", cell):
            if "svc_" not in promql:
                continue
            for metric, matchers in selectors(promql):
                if metric not in samples:
                    problems.append(f"{alert}: no metric {metric}")
                    continue
                for label, op, value in matchers:
                    if label not in samples[metric]:
                        problems.append(f"{alert}: {metric} has no label {label}")
                    elif label == "route" and op in ("=", "!="):
                        if value not in routes:
                            problems.append(f"{alert}: no route {value!r}")
                    elif label == "route":
                        for regex in alternatives(value):
                            if not any(re.fullmatch(regex, route) for route in routes):
                                problems.append(f"{alert}: {regex!r} matches no route")
                    elif op == "=" and exposed_values.get(metric, {}).get(label):
                        if value not in exposed_values[metric][label]:
                            problems.append(f"{alert}: {metric} never has {label}={value!r}")
            for group in re.findall(r"\bby \(([^)]*)\)", promql):
                names = {name for metric, _ in selectors(promql) for name in samples.get(metric, ())}
                problems += [
                    f"{alert}: by ({label})" for label in re.split(r"\s*,\s*", group) if label not in names
                ]
    assert problems == []


async def test_the_metrics_table_lists_every_metric_and_every_value_the_code_writes(store):
    _, families = await exposed(store)
    table = metrics_table()
    assert sorted(families - set(table)) == [], "docs/operations.md does not list these metrics"
    assert sorted(set(table) - families) == [], "docs/operations.md lists metrics the code does not emit"
    stored = {
        **{k: f"{v[0]}_total" for k, v in STORED_COUNTERS.items()},
        **{k: v[0] for k, v in STORED_HISTOGRAMS.items()},
    }
    for name, entry in counted_in_code().items():
        row = table[stored[name]]
        for label, values in entry.labels.items():
            assert label in row, f"{stored[name]}: the label {label} is not in its row"
            missing = sorted(value for value in values if f"`{value}`" not in row)
            assert missing == [], f"{stored[name]}: {label} values {missing} are not in its row"


def stream_routes() -> set[str]:
    """The long-lived event-stream routes: API routes answering an event stream, and dashboard
    pages whose handler relays one (api/sse.py)."""
    found = {route.path for route in ROUTES if route.response and issubclass(route.response, EventStream)}
    for path in (ROOT / "api" / "pages").rglob("*.py"):
        for node in ast.walk(parse(path.read_text())):
            if isinstance(node, ast.AsyncFunctionDef) and any(
                isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "relay"
                for call in ast.walk(node)
            ):
                for decorator in node.decorator_list:
                    if isinstance(decorator, ast.Call) and isinstance(decorator.args[0], ast.Constant):
                        found.add(str(decorator.args[0].value))
    return found


def test_the_slow_api_alert_leaves_out_every_stream():
    ((_, cell),) = [row for row in alert_rows() if row[0] == "Slow API"]
    ((_, matchers),) = selectors(re.findall(r"`([^`]+)`", cell)[0])
    excluded = [value for label, op, value in matchers if label == "route" and op == "!~"]
    assert excluded, "the Slow API alert excludes routes by a route!~ matcher"
    streams = stream_routes()
    assert {"/api/installs/{installId}/runs/{runId}/stream", "/installs/{id}/live"} <= streams
    timed = sorted(route for route in streams if not re.fullmatch(excluded[0], route))
    assert timed == [], "the Slow API alert times these long-lived streams"


def test_the_alert_checker_catches_a_wrong_route_and_a_dead_exclusion():
    """The checks above can fail: the route label as the docs once spelled it is no route, and an
    exclusion naming a route that does not exist matches nothing."""
    routes = route_templates()
    assert "/api/installs/{id}/run" not in routes and "/api/installs/{installId}/run" in routes
    (metric, matchers), *_ = selectors(
        'svc_http_requests_total{route="/api/installs/{id}/run", status=~"5.."}'
    )
    assert metric == "svc_http_requests_total" and matchers[0] == ("route", "=", "/api/installs/{id}/run")
    dead = [r for r in alternatives(".*/(stream|nowhere)") if not any(re.fullmatch(r, x) for x in routes)]
    assert dead == [".*/nowhere"]


def test_the_scrape_target_is_the_compose_api_service():
    block = re.search(r"```yaml\n# prometheus.yml\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert block, "docs/operations.md has the Prometheus scrape configuration"
    config = yaml.safe_load(block.group(1))
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    (job,) = config["scrape_configs"]
    targets = [(name, sd["port"]) for sd in job.get("dns_sd_configs", []) for name in sd["names"]] + [
        tuple(t.rsplit(":", 1)) for c in job.get("static_configs", []) for t in c["targets"]
    ]
    assert targets
    exposed_port = re.search(r"^EXPOSE (\d+)$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert exposed_port
    for host, port in targets:
        assert host in services, f"the scrape target {host} is not a compose service"
        assert str(port) == exposed_port.group(1), "the API listens on the image's port"
