"""The deployment's configuration as Ray actors read it: the settings from Ray's key-value
store, the secrets from the node they run on.

Actors take no settings as creation arguments (Ray keeps those for the actor's whole life, so
an actor would keep a rotated key or a database address that no longer answers), and nothing
secret goes where the Ray cluster keeps state: whoever holds the Ray token can read its
key-value store and its actors' options. So every API process publishes, per deployment:

- the settings with every secret left out (config/secrets.py; JSON, never a pickle);
- a version: a hash of those settings and of an HMAC of the secrets under the newest Fernet
  key, so equal configurations have equal versions, a new key or password changes it, and
  the published hash tells nothing about a secret;
- for a Ray whose head is on this machine only (`svc serve` without SVC_RAY_ADDRESS, `auto`,
  or a head at one of this machine's addresses: `on_this_machine`), the path of a secret file
  it wrote for the actors: mode 0600 in a 0700 directory of its data directory.

`current()` adds the secrets on the actor's node: from that file when the node has it (the
local Ray), otherwise from the node's own settings: its environment, or the files of
SVC_SECRETS_DIR (a mounted Kubernetes Secret, one file per variable), read the way `svc serve`
reads them. The node must then have SVC_MONGODB_URI and SVC_SECRET_KEYS; docs/deploy.md has
both layouts. An actor compares the version it was built from with the published one between
runs and restarts itself when it is older; the version is also published under a key of its
own (`current_version`), so that check, made before every command, reads a few bytes rather than
the whole configuration and the secret file.

A deployment is one database: two deployments sharing a Ray cluster have distinct ids, so
their schedulers and configurations never mix.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ray.experimental import internal_kv

from config import secrets as split
from config.settings import Settings

KV_NAMESPACE = "svc"
SECRETS_DIR = "ray-secrets"
NOT_ON_NODE = (
    "the deployment's secrets are not on this Ray node: give it {missing} in its environment or "
    "as files in SVC_SECRETS_DIR (docs/deploy.md, 'Secrets on the Ray nodes')"
)


@dataclass(frozen=True)
class DeploymentConfig:
    """What an actor needs to work: the settings, where the database is, the vault keys, and the
    version they were published under (computed from the content when not given)."""

    settings: Settings
    mongodb_uri: str
    vault_keys: tuple[str, ...]
    version: str = field(default="")

    def __post_init__(self) -> None:
        if not self.version:
            object.__setattr__(self, "version", self._content_version())

    @property
    def deployment(self) -> str:
        return deployment_id(self.settings, self.mongodb_uri)

    def _content_version(self) -> str:
        """A hash of the public settings and a keyed digest of the secrets."""
        secret = json.dumps([split.secret(self.settings), self.mongodb_uri, self.vault_keys], sort_keys=True)
        key = self.vault_keys[0].encode() if self.vault_keys else b""
        digest = hmac.new(key, secret.encode(), hashlib.sha256).hexdigest()
        public = json.dumps(split.public(self.settings), sort_keys=True)
        return hashlib.sha256(f"{public}\n{digest}".encode()).hexdigest()[:16]


def deployment_id(settings: Settings, mongodb_uri: str) -> str:
    """`<database>-<hash>`: the database name, and where it lives (the configured servers, never
    their credentials, or the embedded server's data directory, whose port changes from one start
    to the next). A new database password is the same deployment."""
    parts = urlsplit(mongodb_uri)
    database = parts.path.lstrip("/") or "svc"
    origin = (
        urlsplit(settings.mongodb_uri).netloc.rpartition("@")[2]
        if settings.mongodb_uri
        else f"embedded:{settings.data_dir.resolve()}"
    )
    return f"{database}-{hashlib.sha256(origin.encode()).hexdigest()[:8]}"


def on_this_machine(address: str | None) -> bool:
    """Whether a Ray address names a Ray whose head shares this machine (and its files): none (a
    local Ray is started), `auto` (the cluster this machine's `ray start` joined), or a head at
    one of this machine's own addresses (one this process can bind). A remote head's nodes read
    their secrets from their own settings."""
    if not address or address == "auto":
        return True
    host = urlsplit(address if "://" in address else f"//{address}").hostname or ""
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    for family, _, _, _, sockaddr in found:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((sockaddr[0], 0))
            except OSError:
                continue
            return True
    return False


def _key(deployment: str) -> bytes:
    return f"config:{deployment}".encode()


def _version_key(deployment: str) -> bytes:
    return f"version:{deployment}".encode()


def secrets_file(settings: Settings, deployment: str) -> Path:
    """Where an API process with a local Ray keeps its actors' secrets."""
    return settings.data_dir / SECRETS_DIR / f"{deployment}.json"


def publish(config: DeploymentConfig, local: bool = False) -> str:
    """Make `config` the deployment's current configuration (needs a Ray connection); its version.

    With `local`, the secrets are written to this machine's secret file for the actors of a
    local Ray, and its path is published with the settings; otherwise only the settings are."""
    path = None
    if local:
        path = secrets_file(config.settings, config.deployment)
        secrets = {"mongodbUri": config.mongodb_uri, "vaultKeys": list(config.vault_keys)}
        _write_private(path, {"settings": split.secret(config.settings), **secrets})
    published = {
        "settings": split.public(config.settings),
        "version": config.version,
        "secretsFile": str(path or ""),
    }
    internal_kv._internal_kv_put(
        _key(config.deployment), json.dumps(published).encode(), overwrite=True, namespace=KV_NAMESPACE
    )
    # Written second: whoever sees the new version and then reads the configuration gets it.
    internal_kv._internal_kv_put(
        _version_key(config.deployment), config.version.encode(), overwrite=True, namespace=KV_NAMESPACE
    )
    return config.version


def forget(config: DeploymentConfig) -> None:
    """Remove this machine's secret file of the deployment (its local Ray has stopped)."""
    secrets_file(config.settings, config.deployment).unlink(missing_ok=True)


def current(deployment: str) -> DeploymentConfig | None:
    """The deployment's current configuration with this node's secrets (None before any API
    process published one). RuntimeError, naming what is missing, when the node has no secrets."""
    raw = internal_kv._internal_kv_get(_key(deployment), namespace=KV_NAMESPACE)
    if not raw:
        return None
    published = json.loads(raw)
    secrets, mongodb_uri, vault_keys = _node_secrets(published.get("secretsFile") or "")
    settings = split.joined(published["settings"], secrets)
    return DeploymentConfig(settings, mongodb_uri, vault_keys, version=published["version"])


def current_version(deployment: str) -> str | None:
    """The version of the deployment's current configuration (None before any was published):
    one small read, for an actor that checks it before every command (actors/install_actor.py)."""
    raw = internal_kv._internal_kv_get(_version_key(deployment), namespace=KV_NAMESPACE)
    return raw.decode() if raw else None


def _node_secrets(path: str) -> tuple[dict[str, Any], str, tuple[str, ...]]:
    """The secrets from the published file when this node has it, else from the node's settings."""
    if path and Path(path).is_file():
        stored = json.loads(Path(path).read_text())
        return stored["settings"], stored["mongodbUri"], tuple(stored["vaultKeys"])
    node = Settings.from_env()
    needed = {"SVC_MONGODB_URI": node.mongodb_uri, "SVC_SECRET_KEYS": node.secret_keys}
    missing = [name for name, value in needed.items() if not value]
    if missing:
        raise RuntimeError(NOT_ON_NODE.format(missing=" and ".join(missing)))
    assert node.mongodb_uri is not None
    return split.secret(node), node.mongodb_uri, node.secret_keys


def _write_private(path: Path, content: dict[str, Any]) -> None:
    """Write `content` as JSON readable by this user only, atomically (a reader never sees half)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".secrets-")  # mode 0600
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(content, handle)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
