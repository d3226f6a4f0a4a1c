"""Traces: the process's tracer and the helpers every layer calls (docs/observability.md, "Traces").

One package owns tracing, so the code that serves a request or runs a team says *what* happens
with a helper and never touches the OpenTelemetry API. It sits beside the egress guard, below the
domain, so every layer can call it:

- the API: `server_span` (each request; an incoming `traceparent` is honoured);
- the Ray seam: `handover_span` (the command sent to an install's actor, with its `carrier`) and
  `attached` (the actor makes the received or stored context current);
- the runtime: `run_span` (`invoke_workflow`), `run_install`, `run_finished`, `run_billed`,
  `gate_paused`, `agent_span` (`invoke_agent`), `agent_finished`, `tool_span` (`execute_tool`),
  `policy_decision`; `context_fields` stores a run's trace context on its record;
- the scheduler: `schedule_fire`;
- the provider transport: `chat_attempt` (one `chat` span per attempt, with its tokens);
- the egress guard: `client_span` (and `traceparent` on every outbound request).

Spans follow the OpenTelemetry GenAI semantic conventions of `SEMCONV_VERSION` (still marked
Development upstream, hence pinned: the tracer carries `SCHEMA_URL`), plus `svc.*` attributes for
what no convention names. `plugins.tracing.sdk.setup` installs the SDK once per process kind; until
then (and without an endpoint) every helper costs a flag test and yields a no-op. Prompts,
completions and tool arguments are recorded only with content capture on, and strings that may
carry user data are masked with the run's secrets (`masked`).
"""

from plugins.tracing.core import (
    OUTCOMES,
    SCHEMA_URL,
    SEMCONV_VERSION,
    Handle,
    attached,
    carrier,
    client_span,
    context_fields,
    detail_fields,
    enabled,
    handover_span,
    masked,
    schedule_fire,
    server_span,
    trace_id_of,
)
from plugins.tracing.genai import (
    ChatAttempt,
    agent_finished,
    agent_span,
    chat_attempt,
    gate_paused,
    policy_decision,
    run_billed,
    run_finished,
    run_install,
    run_span,
    tool_span,
)

__all__ = [
    "OUTCOMES",
    "SCHEMA_URL",
    "SEMCONV_VERSION",
    "ChatAttempt",
    "Handle",
    "agent_finished",
    "agent_span",
    "attached",
    "carrier",
    "chat_attempt",
    "client_span",
    "context_fields",
    "detail_fields",
    "enabled",
    "gate_paused",
    "handover_span",
    "masked",
    "policy_decision",
    "run_billed",
    "run_finished",
    "run_install",
    "run_span",
    "schedule_fire",
    "server_span",
    "tool_span",
    "trace_id_of",
]
