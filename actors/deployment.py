"""The deployment's configuration, published in Ray's cluster key-value store.

Actors read their settings, database address and vault keys from here instead of
taking them as creation arguments (Ray keeps those for the actor's whole life, so an
actor would keep a rotated provider key or a database address that no longer
answers). Every API process publishes its configuration when it connects; each
version is a hash of the content, so an actor compares the version it was built
from with the published one between runs and restarts itself when it is older.

A deployment is one database: two deployments sharing a Ray cluster have distinct
ids, so their schedulers and configurations never mix.
"""

from __future__ import annotations

import hashlib
import pickle
from dataclasses import dataclass
from urllib.parse import urlsplit

from ray.experimental import internal_kv

from config.settings import Settings

KV_NAMESPACE = "svc"


@dataclass(frozen=True)
class DeploymentConfig:
    """What an actor needs to work: the settings, where the database is, the vault keys."""

    settings: Settings
    mongodb_uri: str
    vault_keys: tuple[str, ...]

    @property
    def deployment(self) -> str:
        return deployment_id(self.settings, self.mongodb_uri)

    @property
    def version(self) -> str:
        """A hash of the content: equal configurations have equal versions."""
        return hashlib.sha256(
            pickle.dumps((self.settings.model_dump(mode="json"), self.mongodb_uri, self.vault_keys))
        ).hexdigest()[:16]


def deployment_id(settings: Settings, mongodb_uri: str) -> str:
    """`<database>-<hash>`: the database name, and where it lives (the configured server, or the
    embedded server's data directory, whose port changes from one start to the next)."""
    parts = urlsplit(mongodb_uri)
    database = parts.path.lstrip("/") or "svc"
    origin = (
        urlsplit(settings.mongodb_uri).netloc
        if settings.mongodb_uri
        else f"embedded:{settings.data_dir.resolve()}"
    )
    return f"{database}-{hashlib.sha256(origin.encode()).hexdigest()[:8]}"


def _key(deployment: str) -> bytes:
    return f"config:{deployment}".encode()


def publish(config: DeploymentConfig) -> str:
    """Make `config` the deployment's current configuration (needs a Ray connection); its version."""
    internal_kv._internal_kv_put(
        _key(config.deployment), pickle.dumps(config), overwrite=True, namespace=KV_NAMESPACE
    )
    return config.version


def current(deployment: str) -> DeploymentConfig | None:
    """The deployment's current configuration (None before any API process published one)."""
    raw = internal_kv._internal_kv_get(_key(deployment), namespace=KV_NAMESPACE)
    # Only the cluster writes its key-value store, and whoever can write it can already run
    # code on the cluster: unpickling adds no reach.
    return pickle.loads(raw) if raw else None  # noqa: S301
