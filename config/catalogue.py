"""The model catalogue (config/models.json): the one list of models the service knows.

Model ids are `provider:model`. Agents may use the eight agent models; each
authoring endpoint has its own accepted list and default. `upstream` maps an id
to the provider's own model name, `bedrock` to the Amazon Bedrock model or
inference-profile id that orchC provisions with, and `orchAModels` to Paperclip's
model id for orchA's local adapters. Operators replace any of these
names without editing the package through SVC_MODELS_FILE (docs/models.md):
`load_models_file` validates such a file and `use` makes a mapping the one the
process calls with.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class AuthoringModels:
    """The default and accepted models of one authoring endpoint (None: any agent model)."""

    default: str
    accepted: tuple[str, ...] | None


class ModelsFileError(ValueError):
    """A models file that cannot be used; the message names the file and the key."""


def _load() -> dict[str, Any]:
    return json.loads(resources.files("config").joinpath("models.json").read_text())


_RAW = _load()
AGENT_MODELS: tuple[str, ...] = tuple(_RAW["agentModels"])
AUTHORING: dict[str, AuthoringModels] = {
    name: AuthoringModels(spec["default"], tuple(spec["accepted"]) if spec["accepted"] else None)
    for name, spec in _RAW["authoring"].items()
}
# The packaged defaults, never changed.
DEFAULT_UPSTREAM: Mapping[str, str] = dict(_RAW["upstream"])
DEFAULT_BEDROCK: Mapping[str, str] = dict(_RAW["bedrock"])
# The mapping in use: the defaults until `use` applies a deployment's file. Updated in place, so a
# module that imported these names sees the change.
UPSTREAM: dict[str, str] = dict(DEFAULT_UPSTREAM)
BEDROCK: dict[str, str] = dict(DEFAULT_BEDROCK)
# Paperclip's model id for each of our ids on its local adapters (orchA). Empty by default: an
# agent without an entry runs on its adapter's default model (docs/platforms/orchA.md).
DEFAULT_ORCH_A: Mapping[str, str] = dict(_RAW.get("orchAModels") or {})
ORCH_A_MODELS: dict[str, str] = dict(DEFAULT_ORCH_A)
# The tables a models file may have, and the catalogue ids each accepts.
SECTIONS: dict[str, Mapping[str, str]] = {
    "upstream": DEFAULT_UPSTREAM,
    "bedrock": DEFAULT_BEDROCK,
    "orchA": {model_id: "" for model_id in AGENT_MODELS},
}
DEFAULTS: dict[str, Mapping[str, str]] = {
    "upstream": DEFAULT_UPSTREAM,
    "bedrock": DEFAULT_BEDROCK,
    "orchA": DEFAULT_ORCH_A,
}


def load_models_file(path: Path) -> dict[str, dict[str, str]]:
    """The `upstream`, `bedrock` and `orchA` mappings: the defaults overlaid with a JSON or TOML file.

    Each table maps a catalogue id to a non-empty name; ids a table leaves out keep their
    default. Anything else is refused with a `ModelsFileError` naming the file and the key, so a
    typo stops start-up instead of failing the first run.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ModelsFileError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        data: Any = tomllib.loads(text) if path.suffix.lower() == ".toml" else json.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        kind = "TOML" if path.suffix.lower() == ".toml" else "JSON"
        raise ModelsFileError(f"{path}: not valid {kind} ({exc})") from None
    if not isinstance(data, dict):
        raise ModelsFileError(f"{path}: expected a table with `upstream`, `bedrock` and/or `orchA`")
    mappings = {section: dict(DEFAULTS[section]) for section in SECTIONS}
    for section, entries in data.items():
        if section not in SECTIONS:
            accepted = ", ".join(SECTIONS)
            raise ModelsFileError(f"{path}: key {section!r}: unknown section (accepted: {accepted})")
        if not isinstance(entries, dict):
            raise ModelsFileError(f"{path}: key {section!r}: expected a table of catalogue id to name")
        known = SECTIONS[section]
        for model_id, name in entries.items():
            where = f"{path}: key {section}.{model_id!r}"
            if model_id not in known:
                raise ModelsFileError(f"{where}: unknown catalogue id (known: {', '.join(known)})")
            if not isinstance(name, str) or not name.strip():
                raise ModelsFileError(f"{where}: the name must be a non-empty string")
            mappings[section][model_id] = name.strip()
    return mappings


def use(upstream: Mapping[str, str], bedrock: Mapping[str, str], orch_a: Mapping[str, str]) -> None:
    """Make these mappings the ones this process calls providers, Bedrock and Paperclip with."""
    for live, wanted in ((UPSTREAM, upstream), (BEDROCK, bedrock), (ORCH_A_MODELS, orch_a)):
        live.clear()
        live.update(wanted)


# The platform of an install body that names none (spec: POST /api/installs).
DEFAULT_PLATFORM = "orchA"
