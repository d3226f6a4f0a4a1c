"""The model catalogue (config/models.json): the one list of models the service knows.

Model ids are `provider:model`. Agents may use the eight agent models; each
authoring endpoint has its own accepted list and default. `upstream` maps an id
to the provider's model name (overridable per deployment in a later issue).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True)
class AuthoringModels:
    """The default and accepted models of one authoring endpoint (None: any agent model)."""

    default: str
    accepted: tuple[str, ...] | None


def _load() -> dict[str, object]:
    return json.loads(resources.files("config").joinpath("models.json").read_text())


_RAW = _load()
AGENT_MODELS: tuple[str, ...] = tuple(_RAW["agentModels"])  # type: ignore[arg-type]
AUTHORING: dict[str, AuthoringModels] = {
    name: AuthoringModels(spec["default"], tuple(spec["accepted"]) if spec["accepted"] else None)
    for name, spec in _RAW["authoring"].items()  # type: ignore[attr-defined]
}
UPSTREAM: dict[str, str] = dict(_RAW["upstream"])  # type: ignore[arg-type]
# The platform of an install body that names none (spec: POST /api/installs).
DEFAULT_PLATFORM = "orchA"
# Paperclip's model id for each of our ids on its local adapters (orchA). Empty by default: an
# agent without an entry runs on its adapter's default model (docs/platforms/orchA.md).
ORCH_A_MODELS: dict[str, str] = dict(_RAW.get("orchAModels") or {})  # type: ignore[call-overload]
