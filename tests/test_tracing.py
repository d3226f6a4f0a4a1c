"""Span shapes of a run (docs/observability.md, "Traces"), with the SDK's in-memory exporter.

The agent loop runs in this process against a fake providerA and a target server over real HTTP,
inside a run span, with tracing installed by `plugins.tracing.sdk.setup` as in any process. What is
checked is what a trace backend would show: the tree (`invoke_workflow` > `invoke_agent` > `chat`
and `execute_tool` > `invoke_agent` or the outbound `GET`), GenAI attributes, tokens equal to the
run's, the access-policy verdicts, one `chat` span per attempt, no prompt text and no secret unless
content capture is on (and secrets masked even then), and the W3C context on outbound requests.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from config import secrets
from config.settings import Settings
from config.tracing import TraceSettings
from plugins import tracing
from plugins.manager import PROVIDER_BUILTINS, Plugins
from plugins.tracing import sdk as tracing_sdk
from plugins.types import ChatMessage
from svc.runtime import LLM
from svc.runtime.agent_loop import RunScope, TeamRunner
from svc.runtime.journal import Journal, ScratchRecorder, Totals, scratch
from tests.support.mcp import exact_http, policy, rule
from tests.support.runtime import provider_settings, start_llm, start_target
from tests.test_mcp_toolbox import Harness, service_for
from tests.test_mcp_toolbox import team as mcp_team

SECRET = "tok-secret-0123456789"
TASK = "Summarise the quarterly launch plan"


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    """Tracing installed in this process with an in-memory exporter (content capture off)."""
    exporter = InMemorySpanExporter()
    stop = tracing_sdk.setup(TraceSettings(), "api", exporter=exporter)
    yield exporter
    stop()


@pytest.fixture
def captured() -> Iterator[InMemorySpanExporter]:
    """The same with content capture on (SVC_TRACE_CONTENT=on)."""
    exporter = InMemorySpanExporter()
    stop = tracing_sdk.setup(TraceSettings(capture_content=True), "api", exporter=exporter)
    yield exporter
    stop()


def team(target: str) -> dict[str, Any]:
    """A lead that delegates to a worker whose policy allows /allowed on the target and denies the rest."""
    host = target.split("://")[1].split(":")[0]
    policy = {
        "accessPolicyVersion": "1",
        "defaultAction": "deny",
        "rules": [{"match": {"host": host, "pathPrefix": "/allowed"}, "action": "allow", "reason": "docs"}],
    }
    return {
        "agents": [
            {"key": "lead", "name": "Lead", "model": "providerA:small", "prompt": "You are the lead."},
            {
                "key": "worker",
                "name": "Worker",
                "model": "providerA:small",
                "prompt": "You are the worker.",
                "reportsTo": "lead",
                "accessPolicy": policy,
            },
        ]
    }


async def run_team(store: Any, aiohttp_server: Any) -> tuple[Any, Any, Any]:
    """The scripted team run inside a run span: (result, the fake provider, the target)."""
    fake, url = await start_llm(aiohttp_server)
    target = await start_target(aiohttp_server)
    settings = Settings.from_env({}, providers=provider_settings(url), egress_allow_private=True)
    llm = LLM(Plugins(builtins=PROVIDER_BUILTINS), settings)
    fake.script(tool_calls=[{"name": "delegate_worker", "arguments": {"task": "fetch it"}}], input_tokens=40)
    fake.script(
        tool_calls=[
            {
                "name": "http_request",
                "arguments": {"method": "GET", "url": target.base + "/allowed/${TOKEN}?q=1"},
            },
            {"name": "http_request", "arguments": {"method": "POST", "url": target.base + "/denied"}},
        ],
        input_tokens=30,
        output_tokens=7,
    )
    fake.script(text="worker done", input_tokens=25, output_tokens=4)
    fake.script(text="final answer", input_tokens=60, output_tokens=9)
    scope = RunScope("inst-1", "run-1", {"TOKEN": SECRET}, True, "providerA:small")
    with tracing.run_span("run-1", "run", None):
        result = await TeamRunner(llm, scratch("run-1")).run_team(scope, team(target.base), TASK)
    return result, fake, target


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def one(spans: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    found = by_name(spans, name)
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def strings(spans: tuple[ReadableSpan, ...]) -> str:
    """Every attribute and event value of every span, as one text."""
    parts = []
    for span in spans:
        parts += [str(v) for v in (span.attributes or {}).values()]
        for event in span.events:
            parts += [str(v) for v in (event.attributes or {}).values()]
    return "\n".join(parts)


async def test_a_team_run_is_one_tree_of_genai_spans(store, aiohttp_server, exported):
    result, _, target = await run_team(store, aiohttp_server)
    assert result.status == "completed" and result.response == "final answer"
    spans = exported.get_finished_spans()
    assert len({s.context.trace_id for s in spans}) == 1, "one trace"
    run = one(spans, "invoke_workflow")
    lead, worker = one(spans, "invoke_agent Lead"), one(spans, "invoke_agent Worker")
    delegate = one(spans, "execute_tool delegate_worker")
    allowed, denied = sorted(by_name(spans, "execute_tool http_request"), key=lambda s: s.start_time)
    get = one(spans, "GET")
    chats = [s for s in spans if s.name.startswith("chat ")]
    # The tree.
    assert parent_of(run) is None
    assert parent_of(lead) == run.context.span_id
    assert parent_of(delegate) == lead.context.span_id
    assert parent_of(worker) == delegate.context.span_id
    assert parent_of(allowed) == parent_of(denied) == worker.context.span_id
    assert parent_of(get) == allowed.context.span_id
    assert sorted(parent_of(c) for c in chats) == sorted(
        [lead.context.span_id] * 2 + [worker.context.span_id] * 2
    )
    # GenAI attributes (semantic conventions pinned in the scope's schema URL).
    assert all(s.instrumentation_scope.schema_url == tracing.SCHEMA_URL for s in spans)
    assert lead.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert lead.attributes["gen_ai.agent.name"] == "Lead" and lead.attributes["gen_ai.agent.id"] == "lead"
    assert lead.attributes["gen_ai.provider.name"] == "anthropic"
    for chat in chats:
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.provider.name"] == "anthropic"
        assert chat.attributes["gen_ai.request.model"] == chat.name.removeprefix("chat ")
        assert chat.attributes["svc.llm.purpose"] == "agent" and chat.attributes["svc.llm.attempt"] == 1
    assert allowed.attributes["gen_ai.tool.name"] == "http_request"
    assert allowed.attributes["gen_ai.operation.name"] == "execute_tool"
    # Tokens: the chat spans add up to the run's totals, each agent span to its step's.
    assert sum(c.attributes["gen_ai.usage.input_tokens"] for c in chats) == result.input_tokens == 155
    assert sum(c.attributes["gen_ai.usage.output_tokens"] for c in chats) == result.output_tokens
    steps = {s.agent_key: s for s in result.steps}
    assert worker.attributes["gen_ai.usage.input_tokens"] == steps["worker"].input_tokens == 55
    assert lead.attributes["gen_ai.usage.output_tokens"] == steps["lead"].output_tokens
    # The verdicts, on the tool spans (and one event each).
    assert allowed.attributes["svc.policy.outcome"] == "allowed"
    assert (allowed.attributes["svc.policy.decision"], allowed.attributes["svc.policy.source"]) == (
        "ALLOW",
        "rule",
    )
    assert denied.attributes["svc.policy.outcome"] == "denied"
    assert (denied.attributes["svc.policy.decision"], denied.attributes["svc.policy.source"]) == (
        "BLOCK",
        "default",
    )
    assert denied.status.status_code.name == "ERROR" and denied.attributes["error.type"] == "policy_denied"
    assert [e.name for e in denied.events] == ["svc.policy.decision"]
    # A denied request is never sent; the provider calls are HTTP spans under their chat spans.
    assert [r["path"] for r in target.received] == ["/allowed/" + SECRET]
    posts = by_name(spans, "POST")
    assert len(posts) == 4 and {parent_of(p) for p in posts} == {c.context.span_id for c in chats}
    # W3C context out: the target saw the GET span as its parent.
    sent = target.received[0]["headers"]["traceparent"]
    assert sent.startswith(f"00-{get.context.trace_id:032x}-{get.context.span_id:016x}-")
    assert get.attributes["http.response.status_code"] == 200
    # Nothing of the prompts, the task or the answers; the secret masked in the URL; no query.
    text = strings(spans)
    for private in (TASK, "You are the lead.", "final answer", "worker done", SECRET, "q=1"):
        assert private not in text
    assert get.attributes["url.full"].endswith("/allowed/***")
    assert allowed.attributes["url.full"].endswith("/allowed/${TOKEN}")


async def test_content_capture_records_prompts_and_completions_with_secrets_masked(
    store, aiohttp_server, captured
):
    await run_team(store, aiohttp_server)
    spans = captured.get_finished_spans()
    chats = sorted((s for s in spans if s.name.startswith("chat ")), key=lambda s: s.start_time)
    assert TASK in chats[0].attributes["gen_ai.input.messages"]
    assert "You are the lead." in chats[0].attributes["gen_ai.system_instructions"]
    assert "final answer" in chats[-1].attributes["gen_ai.output.messages"]
    allowed = min(by_name(spans, "execute_tool http_request"), key=lambda s: s.start_time)
    assert "${TOKEN}" in allowed.attributes["gen_ai.tool.call.arguments"]
    # The target echoed the path with the secret filled in: recorded masked.
    assert "/allowed/***" in allowed.attributes["gen_ai.tool.call.result"]
    assert SECRET not in strings(spans)


async def test_each_attempt_of_a_model_call_is_a_chat_span_of_its_own(aiohttp_server, exported):
    fake, url = await start_llm(aiohttp_server)
    llm = LLM(Plugins(builtins=PROVIDER_BUILTINS), Settings.from_env({}, providers=provider_settings(url)))
    fake.fail_next(1, status=503, retry_after=0)
    fake.script(text="second time lucky", input_tokens=12, output_tokens=3)
    answer = await llm.complete("providerA:small", "system", [ChatMessage("user", "hi")])
    assert answer.text == "second time lucky"
    spans = exported.get_finished_spans()
    first, second = sorted((s for s in spans if s.name.startswith("chat ")), key=lambda s: s.start_time)
    assert first.name == second.name
    # Each attempt's HTTP request is a child of its own attempt.
    posts = by_name(spans, "POST")
    assert sorted(parent_of(p) for p in posts) == sorted([first.context.span_id, second.context.span_id])
    assert (first.attributes["svc.llm.attempt"], second.attributes["svc.llm.attempt"]) == (1, 2)
    assert first.attributes["error.type"] == "503" and first.attributes["svc.llm.retried"] is True
    assert "gen_ai.usage.input_tokens" not in first.attributes
    assert (
        second.attributes["gen_ai.usage.input_tokens"],
        second.attributes["gen_ai.usage.output_tokens"],
    ) == (
        12,
        3,
    )
    assert second.status.status_code.name == "UNSET"


async def test_the_judge_is_a_judge_chat_under_the_tool_call_with_its_reasoning(
    store, aiohttp_server, exported
):
    fake, url = await start_llm(aiohttp_server)
    target = await start_target(aiohttp_server)
    settings = Settings.from_env({}, providers=provider_settings(url), egress_allow_private=True)
    llm = LLM(Plugins(builtins=PROVIDER_BUILTINS), settings)
    agent = {
        "key": "solo",
        "name": "Solo",
        "model": "providerA:small",
        "prompt": "You are solo.",
        "accessPolicy": {"accessPolicyVersion": "1", "rules": [{"action": "require_approval"}]},
    }
    fake.script(
        tool_calls=[{"name": "http_request", "arguments": {"method": "GET", "url": target.base + "/x"}}]
    )
    fake.script(text='{"decision": "block", "reasoning": "not needed for the task", "confidence": 0.9}')
    fake.script(text="gave up")
    scope = RunScope("inst-1", "run-2", {}, True, "providerA:small")
    await TeamRunner(llm, scratch("run-2")).run_agent(scope, agent, "task")
    spans = exported.get_finished_spans()
    tool = one(spans, "execute_tool http_request")
    judge = [s for s in spans if s.name.startswith("chat ") and s.attributes["svc.llm.purpose"] == "judge"]
    assert len(judge) == 1 and parent_of(judge[0]) == tool.context.span_id
    assert tool.attributes["svc.policy.outcome"] == "denied"
    assert (tool.attributes["svc.policy.decision"], tool.attributes["svc.policy.source"]) == (
        "JUDGE",
        "judge",
    )
    assert tool.attributes["svc.policy.judge.reasoning"] == "not needed for the task"
    assert tool.attributes["svc.policy.judge.confidence"] == 0.9
    assert target.received == []


def test_stored_context_and_the_run_detail_fields(exported):
    """A run asked for inside a trace stores its context; the detail's id and link come from it."""
    with tracing.run_span("run-3", "run", None):
        stored = tracing.context_fields()["trace"]
    span = exported.get_finished_spans()[0]
    trace_id = f"{span.context.trace_id:032x}"
    assert tracing.trace_id_of(stored) == trace_id
    fields = tracing.detail_fields(stored, "https://viewer.example/trace/{traceId}?x=1")
    assert fields == {"traceId": trace_id, "traceUrl": f"https://viewer.example/trace/{trace_id}?x=1"}
    assert tracing.detail_fields({"traceparent": "00-garbage"}, "https://v/{traceId}") == {
        "traceId": None,
        "traceUrl": None,
    }


def test_off_every_helper_is_a_no_op():
    """No endpoint: nothing is installed, nothing is stored on records, no header is added."""
    assert not tracing.enabled()
    with (
        tracing.run_span("r", "run", None) as run,
        tracing.agent_span("a", "A", "providerA:small", {}) as agent,
    ):
        assert run.span is None and agent.span is None
        assert tracing.context_fields() == {} and tracing.carrier() == {}
        headers: dict[str, str] = {}
        with tracing.client_span("GET", "https", "example.com", None, "/", headers):
            pass
        assert headers == {}


def test_a_full_export_queue_drops_spans_and_counts_them():
    """A collector too slow for the span rate: spans beyond the bounded queue are dropped, counted,
    and ending a span never waits."""
    release = threading.Event()

    class Stuck(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            release.wait(30)
            return SpanExportResult.SUCCESS

    lost: list[int] = []
    provider = TracerProvider()
    provider.add_span_processor(tracing_sdk._BoundedBatch(Stuck(), lost.append))
    tracer = provider.get_tracer("test")
    extra = 300
    for _ in range(tracing_sdk.MAX_QUEUE + tracing_sdk.BATCH + extra):
        tracer.start_span("s").end()
    release.set()
    provider.shutdown()
    assert extra <= sum(lost) <= extra + tracing_sdk.BATCH


def test_the_collector_credentials_are_never_published_to_the_cluster():
    """OTEL_EXPORTER_OTLP_HEADERS carry the collector's credentials: they are in the settings' secret
    half (read on each Ray node), never in the public half the deployment publishes."""
    settings = Settings.from_env(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
            "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20otlp-s3cret",
        }
    )
    assert settings.tracing.headers == (("Authorization", "Bearer otlp-s3cret"),)
    published = secrets.public(settings)
    assert "otlp-s3cret" not in json.dumps(published)
    assert published["tracing"]["endpoint"] == "http://127.0.0.1:4318/v1/traces"
    assert secrets.joined(published, secrets.secret(settings)) == settings


async def test_a_resumed_run_traces_only_the_calls_it_makes_again(store, aiohttp_server, exported):
    """The journal answers what an earlier attempt of the run recorded (a run resumed after its
    actor died): those model and tool calls are not made again, and get no span; the rest do."""
    fake, url = await start_llm(aiohttp_server)
    target = await start_target(aiohttp_server)
    settings = Settings.from_env({}, providers=provider_settings(url), egress_allow_private=True)
    llm = LLM(Plugins(builtins=PROVIDER_BUILTINS), settings)
    first = scratch("run-4")
    fake.script(tool_calls=[{"name": "delegate_worker", "arguments": {"task": "fetch it"}}], input_tokens=40)
    fake.script(text="worker done", input_tokens=25, output_tokens=4)
    fake.script(text="final answer", input_tokens=60, output_tokens=9)
    scope = RunScope("inst-1", "run-4", {}, True, "providerA:small")
    with tracing.run_span("run-4", "run", None):
        await TeamRunner(llm, first).run_team(scope, team(target.base), TASK)
    assert len([s for s in exported.get_finished_spans() if s.name.startswith("chat ")]) == 3
    exported.clear()
    # The second attempt finds the lead's first answer and the worker's whole turn in the journal.
    done = [e for e in first.log if e["key"] in ("lead/m0", "lead/m0.t0/worker", "lead/m0.t0/worker/m0")]
    done.append({**next(e for e in first.log if e["key"] == "lead/m0.t0"), "output": "worker done"})
    resumed = ScratchRecorder(None, "run-4", "", Journal(done), 0, Totals())  # type: ignore[arg-type]
    fake.script(text="final answer", input_tokens=60, output_tokens=9)
    with tracing.run_span("run-4", "run", None, adopted=True):
        result = await TeamRunner(llm, resumed).run_team(scope, team(target.base), TASK)
    assert result.status == "completed" and result.response == "final answer"
    spans = exported.get_finished_spans()
    kinds = sorted(s.name.split(" ")[0] for s in spans if s.name.split(" ")[0] != "POST")
    assert kinds == ["chat", "invoke_agent", "invoke_workflow"]  # no worker, no delegate tool call
    chat = next(s for s in spans if s.name.startswith("chat "))
    assert chat.attributes["gen_ai.usage.input_tokens"] == 60 and one(spans, "invoke_agent Lead")
    assert [e.name for e in one(spans, "invoke_workflow").events] == ["svc.run.adopted"]


async def test_an_mcp_calls_verdict_is_on_its_tool_span(store, aiohttp_server, exported):
    """Like http_request's: allowed, denied (an error), and a person's approval asked, then granted."""
    await store.ensure_indexes()
    service, _ = await service_for(store, aiohttp_server)
    rules = policy(
        rule("deny", "echo", arguments=[{"path": "$.text", "pattern": "rm *"}]),
        rule("require_approval", "echo"),
        rule("allow", "picture"),
    )
    with exact_http() as url:
        harness = Harness(service, mcp_team(url, rules))
        box = harness.toolbox(secrets={"TOKEN": "s3cret-value"})
        await box.specs()

        async def call(name: str, arguments: dict[str, Any]) -> Any:
            with tracing.tool_span(name, "call-1", arguments):
                return await box.call(name, arguments)

        await call("mcp__exact__picture", {})
        await call("mcp__exact__echo", {"text": "rm -rf /"})
        asked = await call("mcp__exact__echo", {"text": "pay s3cret-value"})
        await service.approvals.decide("i1", asked.approval.approval_id, "approve", "u1")
        made = await call("mcp__exact__echo", {"text": "pay s3cret-value"})
        assert made.output == "pay s3cret-value"
        await service.aclose()
    tools = sorted(
        (s for s in exported.get_finished_spans() if s.name.startswith("execute_tool ")),
        key=lambda s: s.start_time,
    )
    assert [(s.name, s.attributes["svc.policy.outcome"]) for s in tools] == [
        ("execute_tool mcp__exact__picture", "allowed"),
        ("execute_tool mcp__exact__echo", "denied"),
        ("execute_tool mcp__exact__echo", "approval_requested"),
        ("execute_tool mcp__exact__echo", "approval_granted"),
    ]
    assert all(s.attributes["svc.tool.kind"] == "mcp" for s in tools)
    assert tools[0].attributes["url.full"] == "mcp://exact/picture"
    assert (
        tools[1].status.status_code.name == "ERROR" and tools[1].attributes["error.type"] == "policy_denied"
    )
    assert (tools[3].attributes["svc.policy.decision"], tools[3].attributes["svc.policy.source"]) == (
        "ALLOW",
        "approval",
    )
    assert "s3cret-value" not in strings(tuple(tools))
