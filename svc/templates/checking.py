"""Checking a team definition as a builder edits it: errors against the spec, warnings against this
server (POST /api/templates/validate, and the dashboard's editor as you type).

An error is what publishing would refuse, each at its field path
(`definition.agents[0].model`). A warning is what the spec allows but this server cannot run:
an agent on a model whose provider has no API key here. Such a definition is valid (another
deployment, or this one later, may have the provider), so it is never refused; but every run
of that agent here would fail, so the builder is told before publishing, not after installing.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import ValidationError

from config.catalogue import AGENT_MODELS
from svc.core import BadRequest, RequestBody
from svc.templates.definitions import TeamDefinition, check_definition

MAX_ERRORS = 50
# The model a new definition starts from: the first whose provider is configured here (each
# provider's everyday model), else the first (the editor then warns at once).
STARTER_MODELS = ("providerA:small", "providerB:standard", "providerC:flash")


class ValidateBody(RequestBody):
    """POST /api/templates/validate: any JSON object; what is wrong with it is the answer, not a 400."""

    definition: dict[str, Any]


@dataclass(frozen=True)
class Finding:
    """One problem, at the path of the field it is about."""

    path: str
    message: str


@dataclass(frozen=True)
class Report:
    """The answer to "is this definition right": errors block publishing, warnings do not."""

    errors: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """`{valid, errors: [{path, message}], warnings: [...]}` (the API's DefinitionReport)."""
        return {"valid": not self.errors, **asdict(self)}


def error_path(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as the API names fields: `definition.agents[0].model`."""
    path = "definition"
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def provider_of(model: str) -> str:
    """The provider of a catalogue model id (`providerA:small` -> `providerA`)."""
    return model.partition(":")[0]


class Definitions:
    """Checks definitions for the providers this server can call (`Settings.configured_providers`)."""

    def __init__(self, configured: Collection[str]) -> None:
        self.configured = frozenset(configured)

    def check(self, data: Any) -> Report:
        """Parse and validate a definition exactly as publishing does; then the warnings."""
        try:
            definition = TeamDefinition.model_validate(data)
        except ValidationError as exc:
            return Report([Finding(error_path(e["loc"]), e["msg"]) for e in exc.errors()[:MAX_ERRORS]])
        try:
            check_definition(definition)
        except BadRequest as exc:
            path, _, message = exc.message.partition(": ")
            return Report([Finding(path, message or exc.message)])
        return Report(warnings=self.warnings(definition))

    def check_text(self, text: str) -> Report:
        """`check` of the editor's JSON text; a syntax error at its line and column."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            return Report([Finding(f"line {exc.lineno}, column {exc.colno}", exc.msg)])
        return self.check(data)

    def warnings(self, definition: TeamDefinition) -> list[Finding]:
        """Each agent whose model's provider is not configured on this server."""
        return [
            Finding(
                f"definition.agents[{index}].model",
                f"{agent.model}: {provider_of(agent.model)} is not configured on this server; the "
                f"definition is valid and can be published, but runs of agent {agent.key!r} here "
                f"fail until an operator sets SVC_{provider_of(agent.model).upper()}_API_KEY",
            )
            for index, agent in enumerate(definition.agents)
            if provider_of(agent.model) not in self.configured
        ]

    def starter_model(self) -> str:
        """The model a new definition starts from: one this server can run, when there is one."""
        usable = [m for m in (*STARTER_MODELS, *AGENT_MODELS) if provider_of(m) in self.configured]
        return usable[0] if usable else STARTER_MODELS[0]

    def starter(self) -> dict[str, Any]:
        """A one-agent definition to start the editor from."""
        lead = {"key": "lead", "name": "Lead", "model": self.starter_model(), "prompt": "You lead the team."}
        return {"version": "v1", "agents": [lead]}
