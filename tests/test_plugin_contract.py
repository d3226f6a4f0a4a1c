"""The plugin contract: documented, typed, and loaded the way third parties rely on."""

from __future__ import annotations

import inspect
from pathlib import Path

import pluggy
import pytest

from plugins import hookspecs, types
from plugins.manager import BUILTINS, Plugins

GUIDE = (Path(__file__).parent.parent / "docs" / "plugins.md").read_text()


def hook_names() -> list[str]:
    return [name for name, value in vars(hookspecs).items() if name.startswith("svc_") and callable(value)]


@pytest.mark.parametrize("name", hook_names())
def test_every_hook_is_documented_in_the_guide(name):
    assert f"### {name}(" in GUIDE, f"{name} is missing from docs/plugins.md"


@pytest.mark.parametrize("name", hook_names())
def test_every_hook_has_a_docstring_and_typed_signature(name):
    function = getattr(hookspecs, name)
    assert (function.__doc__ or "").strip()
    signature = inspect.signature(function)
    assert signature.return_annotation is not inspect.Signature.empty
    assert all(p.annotation is not inspect.Parameter.empty for p in signature.parameters.values())


def test_the_types_module_exports_exactly_its_public_names():
    public = {
        name
        for name, value in vars(types).items()
        if not name.startswith("_") and isinstance(value, type) and value.__module__ == types.__name__
    }
    assert set(types.__all__) == public


def test_builtins_provide_the_four_platforms():
    plugins = Plugins()
    assert [p.id for p in plugins.platforms()] == ["svc", "orchA", "orchB", "orchC"]
    assert [p.id for p in plugins.platforms() if p.listed] == ["orchA", "orchB", "orchC"]


def test_a_built_in_can_be_disabled():
    plugins = Plugins(disabled=["plugins.builtin.orch_b"])
    assert plugins.platform("orchB") is None and plugins.platform("orchA") is not None


def test_an_implementation_without_a_spec_stops_start_up(tmp_path, monkeypatch):
    module = tmp_path / "typo_plugin.py"
    module.write_text(
        "from plugins.hookspecs import hookimpl\n\n@hookimpl\ndef svc_platfroms():\n    return []\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(pluggy.PluginValidationError):
        Plugins(builtins=(*BUILTINS, "typo_plugin"))


async def test_first_awaited_answer_wins():
    plugins = Plugins()
    assert await plugins.validate_install("svc", {}, {"agents": []}) == []
    assert await plugins.validate_install("nobody", {}, {"agents": []}) == []


async def test_a_driver_without_svc_upgrade_does_not_support_upgrades_in_place():
    """The new hook's default (docs/plugins.md, docs/upgrades.md): no implementation, no in-place move."""
    from plugins.types import UpgradeContext

    context = UpgradeContext(
        install_id="i", platform="orchC", template={}, current_definition={"agents": []},
        definition={"agents": []}, deployed_agents=(), credentials={}, secrets={}, options={}, state={},
        runtime_webhook_url="", webhook_secret="", ingest_url="",
    )
    plugins = Plugins()
    result = await plugins.upgrade("orchC", context)
    assert (result.supported, result.reason) == (
        False, "platform orchC does not support upgrading an install in place"
    )
    assert (await plugins.upgrade("svc", context)).supported is True
