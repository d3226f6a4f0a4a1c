"""The model catalogue (config/models.json): the one list of models the service knows.

Model ids are `provider:model`. Agents may use the eight agent models; each
authoring endpoint has its own accepted list and default. `upstream` maps an id
to the provider's own model name and `bedrock` to the Amazon Bedrock model or
inference-profile id that orchC provisions with. Operators replace any of these
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
SECTIONS = ("upstream", "bedrock")


def load_models_file(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """The (upstream, bedrock) mappings of the defaults overlaid with a JSON or TOML file.

    The file has up to two tables, `upstream` and `bedrock`, each mapping a catalogue id to a
    non-empty name; ids it leaves out keep their default. Anything else is refused with a
    `ModelsFileError` naming the file and the key, so a typo stops start-up instead of failing
    the first run.
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
        raise ModelsFileError(f"{path}: expected a table with `upstream` and/or `bedrock`")
    mappings = {"upstream": dict(DEFAULT_UPSTREAM), "bedrock": dict(DEFAULT_BEDROCK)}
    for section, entries in data.items():
        if section not in SECTIONS:
            raise ModelsFileError(f"{path}: key {section!r}: unknown section (accepted: upstream, bedrock)")
        if not isinstance(entries, dict):
            raise ModelsFileError(f"{path}: key {section!r}: expected a table of catalogue id to name")
        known = DEFAULT_UPSTREAM if section == "upstream" else DEFAULT_BEDROCK
        for model_id, name in entries.items():
            where = f"{path}: key {section}.{model_id!r}"
            if model_id not in known:
                raise ModelsFileError(f"{where}: unknown catalogue id (known: {', '.join(known)})")
            if not isinstance(name, str) or not name.strip():
                raise ModelsFileError(f"{where}: the name must be a non-empty string")
            mappings[section][model_id] = name.strip()
    return mappings["upstream"], mappings["bedrock"]


def use(upstream: Mapping[str, str], bedrock: Mapping[str, str]) -> None:
    """Make these mappings the ones this process calls providers and Bedrock with."""
    UPSTREAM.clear()
    UPSTREAM.update(upstream)
    BEDROCK.clear()
    BEDROCK.update(bedrock)


# The platform of an install body that names none (spec: POST /api/installs).
DEFAULT_PLATFORM = "orchA"
