"""orchB (Relevance AI): moving an install's team to another version in place (docs/upgrades.md).

`POST /agents/upsert` with an `agent_id` updates that agent, without one creates an agent, so
an agent the new version keeps is upserted with its id and new prompt and model, and one it
adds is created. A failure re-upserts the updated agents with the old version's body and
deletes the created ones before raising: the team upstream is the old one again. Agents the
new version drops are deleted last; a refused delete is a warning and the agent stays in the
install's state (`leftoverAgents`) for `DELETE /api/installs/:id?removeUpstream=true`.
"""

from __future__ import annotations

from typing import Any

import httpx

from plugins.builtin.orch_b_client import base_url, delete_agent, model_for, upsert_agent, upsert_body
from plugins.builtin.upgrading import agent_changes, by_key
from plugins.egress import egress_client
from plugins.types import DeployedAgent, PlatformError, UpgradeContext, UpgradeResult


def body_of(agent: dict[str, Any], context: UpgradeContext) -> dict[str, Any]:
    """The upsert body of one team agent, as provisioning sends it; unknown models are refused."""
    model = model_for(agent, context.options)
    if model is None:
        raise PlatformError(f"orchB cannot deploy agent {agent.get('key')!r}: unknown model")
    return upsert_body(agent, model, context.install_id, context.ingest_url)


async def upgrade(context: UpgradeContext) -> UpgradeResult:
    """Plan (dry run) or apply the move; see the module's docstring for the order and the undo."""
    changes = agent_changes(context.current_definition, context.definition)
    target = list(context.definition.get("agents") or [])
    bodies = [body_of(agent, context) for agent in target]  # unknown models: refused up front
    if context.dry_run:
        return UpgradeResult(changes=tuple(changes))
    base = base_url(context.credentials)
    deployed = by_key(context.deployed_agents)
    old_agents = {a["key"]: a for a in context.current_definition.get("agents") or []}
    action = {change.key: change.action for change in changes}
    updated: list[tuple[str, str]] = []
    created: list[str] = []
    async with egress_client(allow_private=context.allow_private) as client:
        try:
            for agent, body in zip(target, bodies, strict=True):
                existing = deployed.get(agent["key"])
                if existing is not None:
                    if action.get(agent["key"]) != "keep":
                        updated.append((existing.externalId, agent["key"]))
                        await upsert_agent(
                            client, base, {**body, "agent_id": existing.externalId}, context.credentials
                        )
                    continue
                agent_id = await upsert_agent(client, base, body, context.credentials)
                created.append(agent_id)
                made = DeployedAgent(key=agent["key"], externalId=agent_id, name=agent["name"])
                deployed[agent["key"]] = made
                if context.on_created is not None:
                    await context.on_created(made)
        except BaseException:
            await _undo(client, base, context, updated, created, old_agents)
            raise
        warnings, leftovers = [], list(context.state.get("leftoverAgents") or [])
        keys = {agent["key"] for agent in target}
        for key, agent in list(deployed.items()):
            if key in keys:
                continue
            try:
                await delete_agent(client, base, agent.externalId, context.credentials)
            except PlatformError as exc:
                if exc.upstream_status != 404:
                    warnings.append(f"agent {key} ({agent.externalId}) was not removed: {exc.detail}")
                    leftovers.append(agent.externalId)
            del deployed[key]
    agents = tuple(deployed[agent["key"]] for agent in target)
    return UpgradeResult(
        changes=tuple(changes),
        deployed_agents=agents,
        state={**context.state, "agentIds": [a.externalId for a in agents], "leftoverAgents": leftovers},
        warnings=tuple(warnings),
    )


async def _undo(
    client: httpx.AsyncClient,
    base: str,
    context: UpgradeContext,
    updated: list[tuple[str, str]],
    created: list[str],
    old_agents: dict[str, dict[str, Any]],
) -> None:
    """Best effort: the old bodies back on the updated agents, the created ones deleted."""
    for agent_id, key in reversed(updated):
        try:
            if key in old_agents:
                body = body_of(old_agents[key], context)
                await upsert_agent(client, base, {**body, "agent_id": agent_id}, context.credentials)
            else:  # made by an interrupted earlier attempt: not part of the old team
                await delete_agent(client, base, agent_id, context.credentials)
        except PlatformError:
            pass
    for agent_id in reversed(created):
        try:
            await delete_agent(client, base, agent_id, context.credentials)
        except PlatformError:
            pass
