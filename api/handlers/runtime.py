"""The managed runtime: sync runs, the webhook trigger, orchA heartbeats, the security log."""

from __future__ import annotations

from aiohttp import web

from api.context import principal, services
from api.errors import error_response
from api.routing import RouteTable
from api.schemas import (
    HeartbeatReply,
    PolicyList,
    Queued,
    RetryQueued,
    RunOutcome,
    RuntimeTestReply,
    SecurityRequestList,
)
from svc.core import window_floor
from svc.runtime import (
    HeartbeatBody,
    RunBody,
    RunScope,
    RuntimeTestBody,
    TeamRunner,
    WebhookBody,
    read_back,
    read_back_mcp,
    scratch,
)

routes = RouteTable()
HEARTBEAT_SECRET_HEADER = "X-Svc-Webhook-Secret"
TEST_MODEL = "providerA:small"


@routes.post("/api/installs/{installId}/run", auth="K", body=RunBody, response=RunOutcome)
async def run(request: web.Request, body: RunBody) -> web.Response:
    """Run the team on a task and answer when it has finished (202 at once with `wait: false`)."""
    result = await services(request).run_service.run(
        principal(request), request.match_info["installId"], body
    )
    # 202: queued (`wait: false`), or still going when SVC_RUN_WAIT_SECONDS ran out.
    return web.json_response(result, status=202 if result["status"] in ("queued", "running") else 200)


@routes.post("/api/installs/{installId}/runs/{runId}/retry", auth="K/S", status=202, response=RetryQueued)
async def retry_run(request: web.Request) -> web.Response:
    """Start a new run with a finished run's input, linked to it by `retryOf`."""
    result = await services(request).run_service.retry(
        principal(request), request.match_info["installId"], request.match_info["runId"]
    )
    return web.json_response(result, status=202)


@routes.post("/api/webhook/{token}", auth="T", body=WebhookBody, response=Queued)
async def webhook_trigger(request: web.Request, body: WebhookBody) -> web.Response:
    """Queue a run; the result is POSTed to callbackUrl when given."""
    result = await services(request).run_service.trigger(principal(request).install_id or "", body)
    return web.json_response(result)


@routes.post("/api/runtime/webhook", auth="P", body=HeartbeatBody, response=HeartbeatReply)
async def runtime_webhook(request: web.Request, body: HeartbeatBody) -> web.Response:
    """An orchA heartbeat for an `http` agent: run its loop, answer like a deployer webhook."""
    secret = request.headers.get(HEARTBEAT_SECRET_HEADER) or request.query.get("secret")
    return web.json_response(await services(request).run_service.heartbeat(body, secret))


@routes.post("/api/runtime/webhook/test", auth="P", body=RuntimeTestBody, response=RuntimeTestReply)
async def runtime_webhook_test(request: web.Request, body: RuntimeTestBody) -> web.Response:
    """Run a system prompt on a task once (no install, no private addresses)."""
    svc = services(request)
    runner = TeamRunner(svc.llm, scratch("runtime-test"))
    scope = RunScope("runtime-test", "runtime-test", {}, False, svc.settings.judge_model)
    agent = {"key": "test", "name": "Test agent", "model": TEST_MODEL, "prompt": body.systemPrompt}
    result = await runner.run_agent(scope, agent, body.task)
    if result.status != "completed":
        return error_response(502, result.error or "The run failed")
    return web.json_response({"response": result.response})


@routes.get("/api/installs/{id}/security/requests", auth="K/S", response=SecurityRequestList)
async def security_requests(request: web.Request) -> web.Response:
    """The install's last 200 outbound agent requests, newest first."""
    svc = services(request)
    install = await svc.installs.owned(principal(request), request.match_info["id"])
    entries = await svc.security_log.latest(install["_id"], window_floor(install))
    return web.json_response({"requests": entries})


@routes.get("/api/installs/{id}/policies", auth="K/S", response=PolicyList)
async def policies(request: web.Request) -> web.Response:
    """Each agent's access policy in the read-back form (null without one)."""
    install = await services(request).installs.owned(principal(request), request.match_info["id"])
    agents = [
        {
            "key": a["key"],
            "name": a["name"],
            "policy": read_back(a.get("accessPolicy")),
            "mcp": read_back_mcp(a.get("accessPolicy")),  # MCP (issue 32): the tool rules
        }
        for a in install["definition"]["agents"]
    ]
    return web.json_response({"agents": agents})
