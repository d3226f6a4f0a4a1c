"""The compose files deploy: valid Compose, every setting reachable through compose.env, Ray
locked, several API processes behind a proxy, MongoDB as a replica set, Ray across machines.

`docker compose` cannot run here, so each file is checked against the Compose Specification's
JSON Schema (tests/data/compose-spec.json, see tests/data/README.md) and its interpolation is
evaluated the way Compose does it, with `.env.example` as the `compose.env`.
"""

from __future__ import annotations

import ast
import inspect
import ipaddress
import json
import re
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from config.settings import Settings
from tests.support.source import parse

ROOT = Path(__file__).resolve().parents[1]
CODE_DIRS = ("svc", "api", "actors", "plugins", "config")
APP_SERVICES = ("api", "ray-head", "ray-worker")
FILES = ("docker-compose.yml", "docker-compose.multi-host.yml", "docker-compose.ray-node.yml")
ENV_FILE = "compose.env"
SETTING_NAME = re.compile(r"^(?:SVC|APP|BILLING)_[A-Z0-9_]+$")
# Names the code writes into the environment of agents it provisions (orchA); it never reads them.
SET_FOR_AGENTS = {"SVC_INSTALL_TOKEN", "SVC_INGEST_URL"}
# Not the service's settings: markers the service sets on the processes it starts (so it can stop
# them), and the `svc templates` command's client variables (docs/settings.md lists all four).
NOT_SERVICE_SETTINGS = {"SVC_PROCESS_MARKER", "SVC_RAY_TOKEN", "SVC_URL", "SVC_API_KEY"}
# Values that are secrets (or carry one): .env.example must leave them empty.
SECRET = re.compile(r"_API_KEY$|SECRET|PASSWORD|TOKEN|^SVC_SMTP_URL$|^APP_API_KEYS$|^SVC_MONGODB_URI$")


def compose(name: str = "docker-compose.yml") -> dict[str, Any]:
    """A compose file as Compose reads it (YAML merge keys resolved)."""
    loaded: dict[str, Any] = yaml.safe_load((ROOT / name).read_text())
    return loaded


def env_file(path: Path) -> dict[str, str]:
    """A dotenv file as Compose parses it: KEY=VALUE, comments, optional quotes."""
    values = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        assert sep, f"{path.name}: {raw!r} is not KEY=VALUE"
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        values[name.strip()] = value
    return values


def example() -> dict[str, str]:
    return env_file(ROOT / ".env.example")


class Recorder(Mapping[str, str]):
    """An empty environment that remembers every name it was asked for."""

    def __init__(self) -> None:
        self.asked: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.asked.add(key)
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self.asked.add(key)
        return default

    def __contains__(self, key: object) -> bool:
        self.asked.add(str(key))
        return False

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


@cache
def code_variables() -> tuple[set[str], list[re.Pattern[str]]]:
    """Every environment variable the code reads: exact names, and patterns from f-strings."""
    names: set[str] = set()
    patterns: list[re.Pattern[str]] = []
    for folder in CODE_DIRS:
        for path in (ROOT / folder).rglob("*.py"):
            tree = parse(path.read_text(), filename=str(path))
            in_fstrings = {
                id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values
            }
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and id(node) not in in_fstrings
                ):
                    if SETTING_NAME.match(node.value):
                        names.add(node.value)
                elif isinstance(node, ast.JoinedStr):
                    parts = [
                        re.escape(v.value) if isinstance(v, ast.Constant) else "[A-Z0-9_]+"
                        for v in node.values
                    ]
                    constants = [str(v.value) for v in node.values if isinstance(v, ast.Constant)]
                    first = node.values[0] if node.values else None
                    if (
                        isinstance(first, ast.Constant)
                        and SETTING_NAME.match(str(first.value) + "X")
                        and all(re.fullmatch(r"[A-Z0-9_]*", c) for c in constants)
                    ):
                        patterns.append(re.compile("^" + "".join(parts) + "$"))
    # What the settings model asks the environment for, whatever the model's shape.
    if "env" in inspect.signature(Settings.from_env).parameters:
        recorder = Recorder()
        Settings.from_env(recorder)
        names |= recorder.asked
    names |= pydantic_settings_names()
    return names - SET_FOR_AGENTS - NOT_SERVICE_SETTINGS, patterns


def pydantic_settings_names() -> set[str]:
    """The variables of a pydantic-settings model (prefix + field name, or the field's alias)."""
    try:
        from pydantic_settings import BaseSettings
    except ImportError:
        return set()
    if not issubclass(Settings, BaseSettings):
        return set()
    prefix = str(Settings.model_config.get("env_prefix", ""))
    names = set()
    for field_name, field in Settings.model_fields.items():
        alias = field.validation_alias or field.alias
        names.add(str(alias) if isinstance(alias, str) else f"{prefix}{field_name}".upper())
    return names


REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)")


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's interpolation: $$, ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?err}, nested."""
    out = []
    i = 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("${", i):
            depth, j = 1, i + 2
            while depth:
                if text.startswith("${", j):
                    depth, j = depth + 1, j + 2
                    continue
                depth -= text[j] == "}"
                j += 1
            out.append(expand(text[i + 2 : j - 1], env))
            i = j
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


class Unset(ValueError):
    """A required variable (`${VAR:?message}`) is not set."""


def expand(body: str, env: Mapping[str, str]) -> str:
    """One `${...}` body."""
    match = re.match(r"([A-Za-z_][A-Za-z0-9_]*)(:?[-?+])?(.*)$", body, re.DOTALL)
    assert match, f"bad interpolation ${{{body}}}"
    name, op, rest = match.groups()
    value = env.get(name)
    empty = value is None or (value == "" and op is not None and op.startswith(":"))
    if op in (":-", "-"):
        return interpolate(rest, env) if empty else str(value)
    if op in (":?", "?"):
        if empty:
            raise Unset(f"{name}: {interpolate(rest, env)}")
        return str(value)
    if op in (":+", "+"):
        return "" if empty else interpolate(rest, env)
    return value or ""


def rendered(env: Mapping[str, str], name: str = "docker-compose.yml") -> dict[str, Any]:
    """A compose file with every string interpolated from `env`."""

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            return interpolate(node, env)
        if isinstance(node, list):
            return [walk(n) for n in node]
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        return node

    result: dict[str, Any] = walk(compose(name))
    return result


def filled() -> dict[str, str]:
    """.env.example with the required secrets filled in, as an operator's .env."""
    env = example()
    env.update(
        MONGO_PASSWORD="s3cretpw",
        MONGO_REPLICA_KEY="replica-key-" * 4,
        RAY_AUTH_TOKEN="tok" * 10,
        SVC_SECRET_KEYS="fernet-key",
        SVC_METRICS_TOKEN="scrape-token",
    )
    return env


def multi_host() -> dict[str, str]:
    """An operator's compose.env for Ray across machines (docs/deploy.md, "Another machine")."""
    uri = "mongodb://svc:s3cretpw@10.0.0.1:27017/svc?authSource=admin&directConnection=true"
    return filled() | {"RAY_HEAD_ADDRESS": "10.0.0.1", "RAY_NODE_ADDRESS": "10.0.0.2", "SVC_MONGODB_URI": uri}


def merged(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Compose's merge of an override file: mappings merged, sequences and scalars replaced."""
    out = dict(base)
    for key, value in override.items():
        out[key] = (
            merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


# ---- the file is Compose ----


@pytest.mark.parametrize("name", FILES)
def test_the_compose_files_follow_the_compose_specification(name: str):
    schema = json.loads((ROOT / "tests" / "data" / "compose-spec.json").read_text())
    validator = jsonschema.Draft7Validator(schema)
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(compose(name))
    ]
    assert errors == []
    # The same file after interpolation still is (ports, images, URIs are strings Compose accepts).
    assert list(validator.iter_errors(rendered(multi_host(), name))) == []
    if name == "docker-compose.multi-host.yml":  # and so is the merge it is meant for
        both = merged(rendered(multi_host()), rendered(multi_host(), name))
        assert list(validator.iter_errors(both)) == []


def test_the_schema_catches_a_broken_file():
    schema = json.loads((ROOT / "tests" / "data" / "compose-spec.json").read_text())
    validator = jsonschema.Draft7Validator(schema)
    broken = compose()
    broken["services"]["api"]["healthcheck"]["intervall"] = "10s"
    broken["services"]["api"]["depends_on"]["ray-head"]["condition"] = "service_ready"
    assert len(list(validator.iter_errors(broken))) == 2


# ---- every setting through .env ----


def test_every_variable_the_code_reads_is_in_env_example():
    names, patterns = code_variables()
    listed = set(example())
    assert {"SVC_MONGODB_URI", "SVC_PROVIDERA_API_KEY", "SVC_ORCHB_BASE_URL", "APP_API_KEYS"} <= names
    assert sorted(names - listed) == [], "add these to .env.example (and docs/settings.md)"
    for pattern in patterns:
        assert any(pattern.match(name) for name in listed), (
            f"nothing in .env.example matches {pattern.pattern}"
        )


def test_env_example_lists_nothing_unknown():
    names, patterns = code_variables()
    text = "\n".join((ROOT / name).read_text() for name in FILES)
    used_by_compose = set(REF.findall(text))
    unknown = [
        name
        for name in example()
        if name not in names and name not in used_by_compose and not any(p.match(name) for p in patterns)
    ]
    assert unknown == []


def test_secrets_are_empty_in_env_example():
    leaked = [name for name, value in example().items() if SECRET.search(name) and value]
    assert leaked == []


def test_the_app_services_read_env_and_nothing_overrides_it():
    names, _ = code_variables()
    services = compose()["services"]
    for name in APP_SERVICES:
        service = services[name]
        env_files = service["env_file"] if isinstance(service["env_file"], list) else [service["env_file"]]
        assert ENV_FILE in [f if isinstance(f, str) else f["path"] for f in env_files], name
        for key, value in (service.get("environment") or {}).items():
            if key in names:
                # Set here only as a default that .env can replace: ${KEY} or ${KEY:-...} / ${KEY:?...}.
                assert str(value).startswith("${" + key), f"{name}: {key} is fixed to {value!r}"


def test_one_image_built_once_for_the_api_and_the_ray_nodes():
    services = compose()["services"]
    images = {services[name]["image"] for name in APP_SERVICES}
    assert len(images) == 1
    built = [name for name in services if "build" in services[name]]
    assert built == ["ray-head"]
    assert services["ray-head"]["pull_policy"] == "build"
    assert all(services[name]["pull_policy"] == "never" for name in APP_SERVICES if name != "ray-head")
    assert rendered(filled())["services"]["api"]["image"] == filled()["IMAGE"]


def test_the_database_is_a_replica_set_with_a_key_file_auth_and_pinned():
    mongo = compose()["services"]["mongo"]
    assert re.fullmatch(r"mongo:\d+\.\d+\.\d+", mongo["image"])
    started = " ".join(mongo["command"])
    assert "--replSet rs0" in started and "--keyFile /data/replica.key" in started  # a key file implies auth
    assert "MONGO_REPLICA_KEY" in started and "umask 077" in started
    assert "rs.initiate" in " ".join(mongo["healthcheck"]["test"])
    env = rendered(filled())["services"]
    assert env["mongo"]["environment"]["MONGO_INITDB_ROOT_PASSWORD"] == "s3cretpw"
    uri = env["api"]["environment"]["SVC_MONGODB_URI"]
    assert uri == "mongodb://svc:s3cretpw@mongo:27017/svc?authSource=admin&replicaSet=rs0"
    assert Settings.from_env({"SVC_MONGODB_URI": uri}).mongodb_uri == uri
    # An operator's own URI in .env wins over the compose default.
    own = filled() | {"SVC_MONGODB_URI": "mongodb://u:p@db.example:27017/svc"}
    assert rendered(own)["services"]["api"]["environment"]["SVC_MONGODB_URI"] == own["SVC_MONGODB_URI"]


REQUIRED = {
    "docker-compose.yml": (
        "MONGO_PASSWORD MONGO_REPLICA_KEY RAY_AUTH_TOKEN SVC_SECRET_KEYS SVC_METRICS_TOKEN".split()
    ),
    "docker-compose.multi-host.yml": ["RAY_HEAD_ADDRESS"],
    "docker-compose.ray-node.yml": (
        "RAY_AUTH_TOKEN SVC_SECRET_KEYS SVC_MONGODB_URI RAY_HEAD_ADDRESS RAY_NODE_ADDRESS".split()
    ),
}


@pytest.mark.parametrize(
    ("name", "secret"), [(name, secret) for name, names in REQUIRED.items() for secret in names]
)
def test_a_missing_secret_stops_compose_naming_it(name: str, secret: str):
    with pytest.raises(Unset, match=rf"^{secret}: set {secret} in {ENV_FILE}"):
        rendered(multi_host() | {secret: ""}, name)
    rendered(multi_host(), name)  # and with it set, the file renders


def test_the_api_data_volume_is_where_the_service_writes():
    api = compose()["services"]["api"]
    targets = [v.split(":")[1] for v in api["volumes"]]
    assert example()["SVC_DATA_DIR"] in targets


# ---- health, order, Ray ----


def test_healthchecks_limits_and_start_order():
    for name in FILES:
        for service, spec in compose(name)["services"].items():
            if name == "docker-compose.multi-host.yml":
                continue  # an override: the base file's checks apply
            assert spec["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), (name, service)
            limits = spec["deploy"]["resources"]["limits"]
            assert limits["cpus"] and limits["memory"], (name, service)
    services = compose()["services"]
    assert services["api"]["depends_on"]["ray-head"]["condition"] == "service_healthy"
    assert services["api"]["depends_on"]["mongo"]["condition"] == "service_healthy"
    assert services["ray-worker"]["depends_on"]["ray-head"]["condition"] == "service_healthy"
    assert "/api/health" in " ".join(services["api"]["healthcheck"]["test"])


def test_ray_token_authentication_is_on_everywhere():
    services = rendered(filled())["services"]
    for name in APP_SERVICES:
        env = services[name]["environment"]
        assert env["RAY_AUTH_MODE"] == "token", name
        assert env["RAY_AUTH_TOKEN"] == filled()["RAY_AUTH_TOKEN"], name
    head = services["ray-head"]["command"]
    port = next(arg.split("=")[1] for arg in head if arg.startswith("--ray-client-server-port="))
    assert services["api"]["environment"]["SVC_RAY_ADDRESS"] == f"ray://ray-head:{port}"
    gcs = next(arg.split("=")[1] for arg in head if arg.startswith("--port="))
    assert f"--address=ray-head:{gcs}" in services["ray-worker"]["command"]


def test_interpolation_follows_compose():
    env = {"SET": "value", "EMPTY": ""}
    assert interpolate("${SET}/${UNSET:-a${SET}b}/${EMPTY:-d}/${EMPTY-d}/$$X", env) == "value/avalueb/d//$X"
    assert interpolate("${SET:+alt}${EMPTY:+alt}", env) == "alt"
    with pytest.raises(Unset):
        interpolate("${EMPTY:?needed}", env)


# ---- several API processes behind a proxy ----


def test_the_proxy_is_the_only_way_in_so_the_api_scales():
    services = rendered(filled())["services"]
    published = {name for name, spec in services.items() if spec.get("ports") and name != "mongo"}
    assert published == {"proxy"}, "`--scale api=N` collides on any fixed host port of the API"
    assert services["mongo"]["ports"] == ["127.0.0.1:27017:27017"], "MongoDB on loopback unless told"
    caddyfile = (ROOT / "deploy" / "Caddyfile").read_text()
    exposed = re.search(r"^EXPOSE (\d+)$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    assert exposed and services["api"]["expose"] == [exposed.group(1)]
    upstream = re.search(r"dynamic a \{\s*name (\S+)\s*port (\d+)", caddyfile)
    assert upstream and upstream.groups() == ("api", exposed.group(1)), "every replica of the api service"
    assert "flush_interval -1" in caddyfile, "event streams pass unbuffered"
    assert "./deploy/Caddyfile:/etc/caddy/Caddyfile:ro" in services["proxy"]["volumes"]
    # The API believes the proxy's X-Forwarded-For, and the proxy's address is on the network.
    proxy_ip = services["proxy"]["networks"]["default"]["ipv4_address"]
    assert services["api"]["environment"]["SVC_TRUSTED_PROXIES"] == f"{proxy_ip}/32"
    subnet = rendered(filled())["networks"]["default"]["ipam"]["config"][0]["subnet"]
    assert ipaddress.ip_address(proxy_ip) in ipaddress.ip_network(subnet)
    assert services["proxy"]["depends_on"]["api"]["condition"] == "service_healthy"


def test_the_image_runs_as_an_unprivileged_user():
    dockerfile = (ROOT / "Dockerfile").read_text()
    users = re.findall(r"^USER (\S+)$", dockerfile, re.MULTILINE)
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert dockerfile.rindex("USER") > dockerfile.rindex("RUN"), "nothing runs as root after it"


# ---- secrets on the Ray nodes, Ray across machines ----


def test_every_ray_node_gets_the_secrets_its_actors_read():
    """Install actors read SVC_MONGODB_URI and SVC_SECRET_KEYS on their node (actors/deployment.py)."""
    nodes = {
        "ray-head": rendered(filled())["services"]["ray-head"],
        "ray-worker": rendered(filled())["services"]["ray-worker"],
        "ray-node": rendered(multi_host(), "docker-compose.ray-node.yml")["services"]["ray-node"],
    }
    for name, node in nodes.items():
        assert node["environment"]["SVC_SECRET_KEYS"] == "fernet-key", name
        assert node["environment"]["SVC_MONGODB_URI"].startswith("mongodb://svc:s3cretpw@"), name


def ray_flags(command: list[str]) -> dict[str, str]:
    return dict(arg[2:].split("=", 1) for arg in command if arg.startswith("--") and "=" in arg)


def test_ray_across_machines_uses_fixed_ports_and_advertised_addresses():
    head = compose()["services"]["ray-head"]
    spread = compose("docker-compose.multi-host.yml")["services"]
    node = compose("docker-compose.ray-node.yml")["services"]["ray-node"]
    assert "networks" not in head, "the override can put the head on the host's network"
    assert spread["ray-head"]["network_mode"] == node["network_mode"] == "host"
    assert spread["ray-worker"]["deploy"]["replicas"] == 0, "bridged workers are unreachable from elsewhere"
    env = multi_host()
    head_flags = ray_flags(rendered(env, "docker-compose.multi-host.yml")["services"]["ray-head"]["command"])
    node_flags = ray_flags(rendered(env, "docker-compose.ray-node.yml")["services"]["ray-node"]["command"])
    assert head_flags["node-ip-address"] == env["RAY_HEAD_ADDRESS"]
    assert node_flags["node-ip-address"] == env["RAY_NODE_ADDRESS"]
    assert node_flags["address"] == f"{env['RAY_HEAD_ADDRESS']}:{head_flags['port']}"
    fixed = (
        "node-manager-port object-manager-port runtime-env-agent-port dashboard-agent-grpc-port "
        "dashboard-agent-listen-port metrics-export-port min-worker-port max-worker-port"
    ).split()
    assert {k: head_flags[k] for k in fixed} == {k: node_flags[k] for k in fixed}
    # The single-machine head has the same fixed ports, so moving to several machines changes no port.
    assert {k: ray_flags(head["command"])[k] for k in fixed} == {k: head_flags[k] for k in fixed}


def test_compose_reads_its_own_env_file_not_the_tours():
    """`.env` is what `make serve` reads (the README's tour); the deployment's is compose.env."""
    assert "compose.env" in (ROOT / ".gitignore").read_text().split()
    for name in FILES:
        text = (ROOT / name).read_text()
        assert "in .env" not in text and "- .env" not in text, name
        assert f"--env-file {ENV_FILE}" in text, f"{name} shows the command that uses it"
