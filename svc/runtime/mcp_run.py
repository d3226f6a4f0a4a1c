"""The MCP side of a run: `McpService` (one per process) and `McpRun` (one per run).

See svc/runtime/mcp_tools.py for the toolbox the agent loop uses and docs/mcp.md for the model.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from config.mcp_catalogue import McpCatalogueEntry
from plugins.egress import EgressDenied
from svc.core import Document, Store
from svc.mcp import Approvals, Catalogue, Consent, McpFailure, Pin, Pool, Target, ToolInfo, Unavailable
from svc.runtime.llm import LLM
from svc.runtime.policy import CompiledPolicy, compile_policy
from svc.runtime.policy import evaluate as evaluate_http
from svc.runtime.security_log import RequestRecord

Sink = Callable[[RequestRecord], Awaitable[None]]
Events = Callable[[str, dict[str, Any]], None]


@functools.lru_cache(maxsize=512)
def _http_policy(policy_json: str) -> CompiledPolicy | None:
    return compile_policy(json.loads(policy_json))


def http_policy(agent: dict[str, Any]) -> CompiledPolicy | None:
    policy = agent.get("accessPolicy")
    return None if policy is None else _http_policy(json.dumps(policy, sort_keys=True))


class McpService:
    """The process's MCP machinery: catalogue, connection pool, consent, approvals."""

    def __init__(
        self,
        store: Store,
        llm: LLM,
        judge_model: str,
        catalogue: dict[str, McpCatalogueEntry],
        allow_private: bool,
        pool: Pool | None = None,
    ) -> None:
        self.store = store
        self.llm = llm
        self.judge_model = judge_model
        self.catalogue = Catalogue(dict(catalogue))
        self.allow_private = allow_private
        self.pool = pool or Pool()
        self.consent = Consent(store)
        self.approvals = Approvals(store)

    def run(
        self,
        *,
        scope_key: str,
        install_id: str,
        run_id: str,
        definition: dict[str, Any],
        template: dict[str, Any],
        owner: dict[str, Any] | None,
        secrets: dict[str, str],
        consent_required: bool = True,
    ) -> McpRun:
        """The MCP side of one run (an install's, or a test chat's without consent records)."""
        return McpRun(
            self, scope_key, install_id, run_id, definition, template, owner, secrets, consent_required
        )

    def for_install(self, install: Document, run_id: str, secrets: dict[str, str], definition: Any) -> McpRun:
        """The MCP side of a run of an install (what the install's actor asks for)."""
        template = {"id": install.get("templateId"), "slug": install.get("templateSlug")}
        return self.run(
            scope_key=f"install:{install['_id']}",
            install_id=install["_id"],
            run_id=run_id,
            definition=definition,
            template=template,
            owner=install.get("owner"),
            secrets=secrets,
        )

    async def aclose(self) -> None:
        await self.pool.aclose()


class McpRun:
    """One run's view of its MCP servers: listings made once, the consent read once."""

    def __init__(
        self,
        service: McpService,
        scope_key: str,
        install_id: str,
        run_id: str,
        definition: dict[str, Any],
        template: dict[str, Any],
        owner: dict[str, Any] | None,
        secrets: dict[str, str],
        consent_required: bool,
    ) -> None:
        self.service = service
        self.scope_key = scope_key
        self.install_id = install_id
        self.run_id = run_id
        self.servers = {s["name"]: s for s in definition.get("mcpServers") or []}
        self.template = template
        self.owner = owner
        self.secrets = secrets
        self.consent_required = consent_required
        # False in a test chat: no approval can be granted there, so none is requested.
        self.approvals_enabled = True
        self._listings: dict[str, asyncio.Task[list[ToolInfo]]] = {}
        self._pins: asyncio.Task[dict[tuple[str, str], Pin]] | None = None
        self.noted: set[tuple[str, str, str]] = set()
        # Metric writes in flight: a call never waits for its count; the run's end does.
        self._counting: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> McpRun:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """The run ended (completed, failed or cancelled): stop listings still in flight. Open
        connections go back to the pool, which closes them when idle."""
        for task in self._listings.values():
            task.cancel()
        self._listings.clear()
        if self._counting:
            await asyncio.gather(*self._counting, return_exceptions=True)

    def count(self, write: Awaitable[None]) -> None:
        """Count a call in /metrics without making the call wait (counting never fails it)."""
        task = asyncio.ensure_future(write)
        self._counting.add(task)
        task.add_done_callback(self._counting.discard)

    async def pins(self) -> dict[tuple[str, str], Pin]:
        if self._pins is None:
            self._pins = asyncio.ensure_future(self.service.consent.pins(self.install_id))
        return await self._pins

    def reach(self, server: dict[str, Any], agent: dict[str, Any]) -> tuple[str, Target, Any]:
        """The pool key, target and transport check of a server for this agent."""
        service = self.service
        target = service.catalogue.target(
            server, self.secrets, service.allow_private, self.template, self.owner
        )
        check = None
        key = f"{self.scope_key}|{target.digest}"
        if server.get("url"):  # a template's server: the agent's HTTP rules hold for the transport
            policy = http_policy(agent)
            if policy is not None:
                check = transport_check(policy)
                key += (
                    "|"
                    + hashlib.sha256(
                        json.dumps(agent.get("accessPolicy"), sort_keys=True).encode()
                    ).hexdigest()
                )
            verdict = evaluate_http(policy, "POST", target.url or "")
            if verdict.action in ("deny", "judge") and not (policy is not None and policy.report_only):
                raise Unavailable(
                    f"the agent's access policy does not allow {server['url']} ({verdict.reason})"
                )
        return key, target, check

    async def listing(self, key: str, target: Target, check: Any) -> list[ToolInfo]:
        """The server's tools, listed once per run (a failed connection is dropped from the pool)."""
        task = self._listings.get(key)
        if task is None:
            task = asyncio.ensure_future(self._list(key, target, check))
            self._listings[key] = task
        return await asyncio.shield(task)

    async def _list(self, key: str, target: Target, check: Any) -> list[ToolInfo]:
        pool = self.service.pool
        connection = await pool.get(key, target, check)
        try:
            return await connection.list_tools()
        except McpFailure as failure:
            if failure.kind in ("crashed", "protocol", "timeout"):
                await pool.drop(key)
            raise


def transport_check(policy: CompiledPolicy) -> Callable[[str, str], Awaitable[None]]:
    """The agent's HTTP rules for each request of the MCP transport: a deny (or a rule that asks
    the judge: the judge decides tool calls, not protocol requests) refuses it."""

    async def check(method: str, url: str) -> None:
        verdict = evaluate_http(policy, method, url)
        if verdict.action in ("deny", "judge") and not policy.report_only:
            raise EgressDenied("refused by the access policy", "refused by the agent's access policy")

    return check
