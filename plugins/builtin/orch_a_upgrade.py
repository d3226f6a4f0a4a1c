"""orchA (Paperclip): moving an install's team to another version in place (docs/upgrades.md).

Agents are matched by team key. In managers-first order, an agent the new version keeps is
updated with `PATCH /api/agents/:id` (`replaceAdapterConfig: true`, so the adapter
configuration is exactly the new version's) and, for a local adapter, its instructions file
with `PUT /api/agents/:id/instructions-bundle/file`; an agent it adds is created as
provisioning creates it. Until then every step can be undone: a failure restores the updated
agents to the old version's configuration, deletes the created ones and raises, so the team
upstream is the old one again. Agents the new version drops are deleted last; deleting cannot
be undone, so a refused delete is a warning and the agent is kept in the install's state
(`leftoverAgents`) for `DELETE /api/installs/:id?removeUpstream=true`.
"""

from __future__ import annotations

from typing import Any

from plugins.builtin.orch_a_client import Client, agent_body, managers_first, ui_links
from plugins.builtin.upgrading import agent_changes, by_key
from plugins.types import (
    DeployedAgent,
    PlatformError,
    ProvisionContext,
    UpgradeContext,
    UpgradeResult,
)

INSTRUCTIONS_FILE = "AGENTS.md"


def provision_view(context: UpgradeContext, definition: dict[str, Any], token: str) -> ProvisionContext:
    """The provisioning context `adapter()` reads, for one definition of the install."""
    return ProvisionContext(
        install_id=context.install_id,
        platform=context.platform,
        template=context.template,
        definition=definition,
        credentials=context.credentials,
        secrets=context.secrets,
        options=context.options,
        install_token=token,
        runtime_webhook_url=context.runtime_webhook_url,
        webhook_secret=context.webhook_secret,
        ingest_url=context.ingest_url,
        allow_private=context.allow_private,
    )


class Mover:
    """One apply: what it changed so far, so that a failure can put it all back."""

    def __init__(self, context: UpgradeContext, client: Client, token: str) -> None:
        self.context = context
        self.client = client
        self.new = provision_view(context, context.definition, token)
        self.old = provision_view(context, context.current_definition, token)
        self.deployed = by_key(context.deployed_agents)
        self.upstream_ids = {key: agent.externalId for key, agent in self.deployed.items()}
        self.old_ids = dict(self.upstream_ids)
        self.runtime_keys: dict[str, str] = dict(context.state.get("runtimeKeys") or {})
        self.updated: list[tuple[str, str]] = []  # (upstream id, key)
        self.created: list[str] = []

    async def update(self, agent: dict[str, Any], agent_id: str) -> None:
        """Replace one agent's configuration with the new version's."""
        body = agent_body(agent, self.new, self.upstream_ids)
        self.updated.append((agent_id, agent["key"]))
        await self._write(agent_id, body)
        if body["adapterType"] == "http":
            await self._runtime_key(agent_id)

    async def create(self, agent: dict[str, Any], company_id: str) -> None:
        """Create an agent the new version adds (recorded at once, like provisioning)."""
        body = agent_body(agent, self.new, self.upstream_ids)
        agent_id = await self.client.create(f"/api/companies/{company_id}/agents", body)
        self.created.append(agent_id)
        self.upstream_ids[agent["key"]] = agent_id
        self.deployed[agent["key"]] = DeployedAgent(key=agent["key"], externalId=agent_id, name=agent["name"])
        if self.context.on_created is not None:
            await self.context.on_created(self.deployed[agent["key"]])
        if body["adapterType"] == "http":
            await self._runtime_key(agent_id)

    async def undo(self) -> None:
        """Best effort: the old version's configuration back on every updated agent, and every
        created agent deleted. The failure that caused the undo is the one reported."""
        old_agents = {a["key"]: a for a in self.context.current_definition.get("agents") or []}
        for agent_id, key in reversed(self.updated):
            old = old_agents.get(key)
            try:
                if old is None:  # made by an interrupted earlier attempt: not part of the old team
                    await self.client.call("DELETE", f"/api/agents/{agent_id}")
                else:
                    await self._write(agent_id, agent_body(old, self.old, self.old_ids))
            except PlatformError:
                pass
        for agent_id in reversed(self.created):
            try:
                await self.client.call("DELETE", f"/api/agents/{agent_id}")
            except PlatformError:
                pass

    async def _write(self, agent_id: str, body: dict[str, Any]) -> None:
        bundle = body.pop("instructionsBundle", None)
        await self.client.call("PATCH", f"/api/agents/{agent_id}", {**body, "replaceAdapterConfig": True})
        if bundle is not None:
            content = bundle["files"][INSTRUCTIONS_FILE]
            await self.client.call(
                "PUT",
                f"/api/agents/{agent_id}/instructions-bundle/file",
                {"path": INSTRUCTIONS_FILE, "content": content},
            )

    async def _runtime_key(self, agent_id: str) -> None:
        """An `http` agent writes run outcomes back as itself: it needs its own agent key."""
        if agent_id in self.runtime_keys or self.context.options.get("webhookUrl"):
            return
        made = await self.client.call("POST", f"/api/agents/{agent_id}/keys", {"name": "svc-runtime"})
        if not isinstance(made.get("token"), str):
            raise PlatformError(f"orchA POST /api/agents/{agent_id}/keys answered without a token")
        self.runtime_keys[agent_id] = made["token"]


async def upgrade(context: UpgradeContext) -> UpgradeResult:
    """Plan (dry run) or apply the move; see the module's docstring for the order and the undo."""
    changes = agent_changes(context.current_definition, context.definition)
    if context.dry_run:
        return UpgradeResult(changes=tuple(changes))
    company_id = context.state.get("companyId")
    if not company_id:
        raise PlatformError("orchA: this install has no stored company to upgrade")
    token = await context.issue_install_token() if context.issue_install_token is not None else ""
    client = Client(context.credentials, context.allow_private)
    mover = Mover(context, client, token)
    action = {change.key: change.action for change in changes}
    try:
        company = await client.call("GET", f"/api/companies/{company_id}")
        try:
            for agent in managers_first(list(context.definition["agents"])):
                existing = mover.deployed.get(agent["key"])
                if existing is None:
                    await mover.create(agent, company_id)
                elif action.get(agent["key"]) != "keep" or mover.created:
                    # A kept agent is written again when a manager was created (its reportsTo id).
                    await mover.update(agent, existing.externalId)
        except BaseException:
            await mover.undo()
            raise
        warnings, leftovers = [], list(context.state.get("leftoverAgents") or [])
        target_keys = {agent["key"] for agent in context.definition["agents"]}
        for key, gone in list(mover.deployed.items()):
            if key in target_keys:
                continue
            try:
                await client.call("DELETE", f"/api/agents/{gone.externalId}")
            except PlatformError as exc:
                if exc.upstream_status != 404:
                    warnings.append(f"agent {key} ({gone.externalId}) was not removed: {exc.detail}")
                    leftovers.append(gone.externalId)
            mover.runtime_keys.pop(gone.externalId, None)
            del mover.deployed[key]
    finally:
        await client.close()
    deployed = tuple(mover.deployed[a["key"]] for a in context.definition["agents"])
    prefix = str(company.get("issuePrefix") or company_id)
    return UpgradeResult(
        changes=tuple(changes),
        deployed_agents=deployed,
        state={**context.state, "runtimeKeys": mover.runtime_keys, "leftoverAgents": leftovers},
        platform_data=ui_links(client.base, prefix, list(deployed)),
        warnings=tuple(warnings),
    )
