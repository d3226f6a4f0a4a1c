"""Upstream model names: real defaults, the SVC_MODELS_FILE override, and what providers receive."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from config import catalogue
from config.settings import Settings, SettingsError
from plugins.builtin import orch_c_bedrock
from tests.fakes.llm import DEFAULT_KEY, FakeLLM
from tests.fakes.orch_c import FakeBedrockAgents
from tests.fakes.orch_c import create_app as bedrock_app
from tests.support.accounts import bearer, create_key, signup
from tests.support.templates import agent, definition, publish_template

ROOT = Path(__file__).resolve().parent.parent
OLLAMA_TOML = """
# providerB pointed at Ollama: its own model names
[upstream]
"providerB:standard" = "llama3.2:3b"
"providerB:mini" = "qwen2.5:0.5b"

[bedrock]
"providerA:small" = "eu.anthropic.claude-haiku-4-5-20251001-v1:0"

[orchA]
"providerA:middle" = "claude-sonnet-4-6"
"""


def test_every_catalogue_id_has_a_real_upstream_name_and_bedrock_id():
    ids = set(catalogue.AGENT_MODELS) | {
        m for spec in catalogue.AUTHORING.values() for m in (spec.default, *(spec.accepted or ()))
    }
    assert ids <= set(catalogue.DEFAULT_UPSTREAM)
    for model_id, name in catalogue.DEFAULT_UPSTREAM.items():
        assert name and not name.startswith("provider"), f"{model_id} maps to a placeholder {name!r}"
    families = {m for m in ids if m.split(":")[0] in orch_c_bedrock.MODEL_FAMILIES}
    assert families <= set(catalogue.DEFAULT_BEDROCK)
    assert all("." in bedrock_id for bedrock_id in catalogue.DEFAULT_BEDROCK.values())


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_a_models_file_overrides_some_names_and_keeps_the_rest(tmp_path, suffix):
    path = tmp_path / f"models{suffix}"
    if suffix == ".toml":
        path.write_text(OLLAMA_TOML)
    else:
        path.write_text(json.dumps({"upstream": {"providerB:standard": "llama3.2:3b"}}))
    settings = Settings.from_env({"SVC_MODELS_FILE": str(path)})
    assert settings.models_file == path
    assert settings.upstream_models["providerB:standard"] == "llama3.2:3b"
    assert settings.upstream_models["providerA:small"] == catalogue.DEFAULT_UPSTREAM["providerA:small"]
    if suffix == ".toml":
        assert settings.bedrock_models["providerA:small"].startswith("eu.anthropic.")
        assert settings.orch_a_models == {"providerA:middle": "claude-sonnet-4-6"}


@pytest.mark.parametrize(
    ("content", "suffix", "words"),
    [
        (
            '[upstream]\n"providerZ:huge" = "x"\n',
            ".toml",
            "key upstream.'providerZ:huge': unknown catalogue id",
        ),
        ('[upstream]\n"providerB:mini" = "  "\n', ".toml", "key upstream.'providerB:mini': the name must be"),
        ('{"bedrock": {"providerC:pro": "google.gemini"}}', ".json", "key bedrock.'providerC:pro': unknown"),
        ('{"models": {}}', ".json", "key 'models': unknown section"),
        ('{"orchA": {"providerB:mini": "x"}}', ".json", "key orchA.'providerB:mini': unknown"),
        ('{"upstream": ["providerB:mini"]}', ".json", "key 'upstream': expected a table"),
        ("{not json", ".json", "not valid JSON"),
        ("[upstream\n", ".toml", "not valid TOML"),
    ],
)
def test_a_bad_models_file_names_the_file_and_the_key(tmp_path, content, suffix, words):
    path = tmp_path / f"models{suffix}"
    path.write_text(content)
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"SVC_MODELS_FILE": str(path)})
    message = str(caught.value)
    assert message.startswith(f"SVC_MODELS_FILE: {path}: ") and words in message and "\n" not in message


def test_a_missing_models_file_is_refused(tmp_path):
    with pytest.raises(SettingsError, match=r"SVC_MODELS_FILE: .*missing\.toml: cannot be read"):
        Settings.from_env({"SVC_MODELS_FILE": str(tmp_path / "missing.toml")})


def test_start_up_with_a_bad_models_file_is_one_line(tmp_path):
    path = tmp_path / "models.toml"
    path.write_text('[upstream]\n"providerB:nope" = "x"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVC_")}
    done = subprocess.run(
        [sys.executable, "-c", "from config.settings import settings_or_exit; settings_or_exit()"],
        env={**env, "PYTHONPATH": str(ROOT), "SVC_MODELS_FILE": str(path)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert str(path) in line and "providerB:nope" in line


def model_settings(path: Path) -> dict[str, Any]:
    """The settings fields SVC_MODELS_FILE sets, for make_client."""
    settings = Settings.from_env({"SVC_MODELS_FILE": str(path)})
    return {
        "models_file": settings.models_file,
        "upstream_models": settings.upstream_models,
        "bedrock_models": settings.bedrock_models,
        "orch_a_models": settings.orch_a_models,
    }


async def test_an_ollama_standing_providerb_receives_the_configured_name(
    tmp_path, aiohttp_server, make_client
):
    """providerB pointed at an OpenAI-compatible server with its own names: a managed run succeeds."""
    path = tmp_path / "models.toml"
    path.write_text(OLLAMA_TOML)
    ollama = FakeLLM("providerB", models=frozenset({"llama3.2:3b", "qwen2.5:0.5b"}))
    server = await aiohttp_server(ollama.app())
    client = await make_client(
        rate_limit_multiplier=None,
        providers={"providerB": {"api_key": DEFAULT_KEY, "base_url": ollama.url(server)}},
        **model_settings(path),
    )
    caller = await signup(client)
    raw_key = await create_key(client, caller)
    key = bearer(raw_key)
    team = definition(agent("lead", model="providerB:standard"))
    template = await publish_template(client, raw_key, visibility="public", definition=team)
    response = await client.post(
        "/api/installs", json={"templateId": template["id"], "platform": "svc"}, headers=key
    )
    assert response.status == 201, await response.text()
    install_id = (await response.json())["installId"]
    ollama.script(text="Hello from llama")
    response = await client.post(f"/api/installs/{install_id}/run", json={"task": "Say hello"}, headers=key)
    assert response.status == 200, await response.text()
    result = await response.json()
    assert (result["status"], result["response"]) == ("completed", "Hello from llama")
    assert [r.body["model"] for r in ollama.requests] == ["llama3.2:3b"]

    # Authoring's providerB:mini goes out under its configured name too.
    ollama.script(text="{}")
    response = await client.post(
        "/api/templates/generate", json={"description": "a team", "model": "providerB:mini"}, headers=key
    )
    assert response.status == 200
    await response.read()
    assert ollama.requests[-1].body["model"] == "qwen2.5:0.5b"


async def test_orch_c_provisions_with_the_configured_bedrock_id(
    tmp_path, aiohttp_server, monkeypatch, make_client
):
    path = tmp_path / "models.toml"
    path.write_text(OLLAMA_TOML)
    fake = FakeBedrockAgents()
    server = await aiohttp_server(bedrock_app(fake))
    monkeypatch.setenv(orch_c_bedrock.ENDPOINT_ENV, f"http://127.0.0.1:{server.port}")
    client = await make_client(rate_limit_multiplier=None, **model_settings(path))
    try:
        caller = await signup(client)
        raw_key = await create_key(client, caller)
        team = definition(agent("boss", model="providerA:small"))
        template = await publish_template(client, raw_key, visibility="public", definition=team)
        body = {"templateId": template["id"], "platform": "orchC", "credentials": fake.credentials()}
        response = await client.post("/api/installs", json=body, headers=bearer(raw_key))
        assert response.status == 201, await response.text()
        (created,) = fake.agents.values()
        assert created["foundationModel"] == "eu.anthropic.claude-haiku-4-5-20251001-v1:0"
    finally:
        catalogue.use(catalogue.DEFAULT_UPSTREAM, catalogue.DEFAULT_BEDROCK, catalogue.DEFAULT_ORCH_A)
