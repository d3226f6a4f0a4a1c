"""No secret where the Ray cluster keeps state; actors read their secrets on their node.

Whoever holds the Ray token can read the cluster's key-value store, its actor table and its job
table. This module runs a service with a secret in every secret setting, lets it start an
install actor and the scheduler, then reads all three whole and looks for every secret value.
Then it checks the two ways an actor's node gets the secrets (actors/deployment.py): the
0600 file a local Ray's API process writes, and the node's own settings (environment, or
SVC_SECRETS_DIR as a mounted Kubernetes Secret lays them out) for a remote head.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import stat
import uuid

import ray
from cryptography.fernet import Fernet
from ray._private import ray_constants
from ray.experimental import internal_kv

from actors import deployment
from actors.install_actor import InstallActor
from actors.runtime import RayRuntime
from actors.scheduler import SchedulerActor
from api.app import RUNTIME, STORE
from api.context import SETTINGS
from config.settings import Settings
from config.tracing import TraceSettings
from tests.fakes.llm import FakeLLM
from tests.support.runtime import member, svc_install
from tests.support.waiting import wait_for


def every_kv_value() -> dict[bytes, bytes]:
    """Every key of the cluster's key-value store with its value, whatever its namespace."""
    namespaces = {None, deployment.KV_NAMESPACE.encode(), b"usage_stats"}
    namespaces |= {
        value for name, value in vars(ray_constants).items() if name.startswith("KV_NAMESPACE") and value
    }
    namespaces |= {  # the GCS's own (autoscaler state)
        str(value).encode() for name, value in vars(ray._raylet).items() if name.endswith("_NAMESPACE")
    }
    found: dict[bytes, bytes] = {}
    keys = internal_kv._internal_kv_list(b"", namespace=None)  # lists keys of every namespace
    assert keys
    for key in keys:
        for namespace in namespaces:
            value = internal_kv._internal_kv_get(key, namespace=namespace)
            if value is not None:
                found[key + b"@" + (namespace or b"")] = value
    unread = sorted(key for key in keys if not any(k.startswith(key + b"@") for k in found))
    assert unread == [], "a key lives in a namespace this test does not read"
    return found


def actor_and_job_rows() -> list[bytes]:
    """The GCS actor table (options, runtime env, names) and job table (drivers' runtime env)."""
    accessor = ray._private.state.state._connect_and_get_accessor()
    return [
        *accessor.get_actor_table(None, None),
        *accessor.get_job_table(skip_submission_job_info_field=False, skip_is_running_tasks_field=True),
    ]


async def test_the_cluster_holds_no_secret(make_client, aiohttp_server, store, secret_key):
    fake = FakeLLM("providerA", default_text="done")
    fake.api_key = f"sk-provider-{uuid.uuid4().hex}"
    server = await aiohttp_server(fake.app())
    secrets = {
        "secret_keys": (secret_key, Fernet.generate_key().decode()),
        "stripe_api_key": f"sk_test_{uuid.uuid4().hex}",
        "stripe_webhook_secret": f"whsec_{uuid.uuid4().hex}",
        "smtp_url": f"smtp://mailer:pw{uuid.uuid4().hex}@127.0.0.1:2525",
        "metrics_token": f"metrics-{uuid.uuid4().hex}",
        "app_api_keys": Settings.from_env({"APP_API_KEYS": f"app-{uuid.uuid4().hex}"}).app_api_keys,
        "providers": {"providerA": {"api_key": fake.api_key, "base_url": fake.url(server)}},
        # The trace collector's credentials (OTEL_EXPORTER_OTLP_HEADERS); no endpoint: nothing sent.
        "tracing": TraceSettings(headers=(("Authorization", f"Bearer otlp-{uuid.uuid4().hex}"),)),
    }
    client = await make_client(rate_limit_multiplier=None, scheduler_enabled=True, **secrets)
    settings = client.server.app[SETTINGS]
    _, key, install_id = await svc_install(client, [member("lead")])
    response = await client.post(f"/api/installs/{install_id}/run", json={"task": "Go"}, headers=key)
    assert (await response.json())["status"] == "completed", "the actor had every secret it needs"
    runtime = client.server.app[RUNTIME]
    assert await wait_for(lambda: asyncio.to_thread(scheduler_exists, runtime.deployment_id))

    values = [
        *settings.secret_keys,
        settings.stripe_api_key,
        settings.stripe_webhook_secret,
        settings.smtp_url,
        settings.smtp_url.split("pw", 1)[1].split("@")[0],
        settings.metrics_token,
        settings.app_api_keys[0].key,
        fake.api_key,
        settings.tracing.headers[0][1],
        client.server.app[STORE].uri,
    ]
    blobs = [*every_kv_value().values(), *actor_and_job_rows()]
    leaked = sorted({value for value in values for blob in blobs if value.encode() in blob})
    assert leaked == []
    # What the deployment publishes is its settings without secrets, and the secret file's path.
    published = json.loads(
        internal_kv._internal_kv_get(
            f"config:{runtime.deployment_id}".encode(), namespace=deployment.KV_NAMESPACE
        )
    )
    assert published["settings"]["secret_keys"] == [] and published["settings"]["mongodb_uri"] is None
    assert published["secretsFile"] == str(deployment.secrets_file(settings, runtime.deployment_id))


def scheduler_exists(deployment_id: str) -> bool:
    names = {entry["name"] for entry in ray.util.list_named_actors(all_namespaces=True)}
    return f"scheduler:{deployment_id}" in names


def test_actors_are_created_with_ids_only():
    """An actor's creation arguments are kept by Ray for its whole life: ids, never settings."""
    install = inspect.signature(InstallActor.__ray_actor_class__.__init__)  # type: ignore[attr-defined]
    scheduler = inspect.signature(SchedulerActor.__ray_actor_class__.__init__)  # type: ignore[attr-defined]
    ours = [
        [name for name in signature.parameters if not name.startswith("_ray")]
        for signature in (install, scheduler)
    ]
    assert ours == [["self", "install_id", "deployment_id"], ["self", "deployment"]]
    # The deployment id names the database and a hash of where it is, never its credentials.
    settings = Settings.from_env({"SVC_MONGODB_URI": "mongodb://svc:hunter2@db:27017/prod"})
    ident = deployment.deployment_id(settings, settings.mongodb_uri or "")
    assert ident.startswith("prod-") and "hunter2" not in ident
    rotated = Settings.from_env({"SVC_MONGODB_URI": "mongodb://svc:newpass@db:27017/prod"})
    assert deployment.deployment_id(rotated, rotated.mongodb_uri or "") == ident, (
        "a new password, same deployment"
    )


async def test_a_local_ray_reads_a_private_file_and_a_remote_one_reads_the_node(make_client, store, tmp_path):
    client = await make_client()
    settings = client.server.app[SETTINGS]
    runtime = client.server.app[RUNTIME]
    path = deployment.secrets_file(settings, runtime.deployment_id)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    here = deployment.current(runtime.deployment_id)
    assert here is not None and here.settings == settings and here.mongodb_uri == store.uri

    # A remote head: nothing is written, and an actor's node supplies the secrets itself.
    remote = RayRuntime("ray://ray-head:10001", store.uri, settings, list(settings.secret_keys))
    assert not remote.local
    other = settings.model_copy(update={"data_dir": tmp_path / "elsewhere"})
    config = deployment.DeploymentConfig(other, store.uri, settings.secret_keys)
    deployment.publish(config)
    assert not deployment.secrets_file(other, config.deployment).exists()
    mounted = tmp_path / "secrets"  # a Kubernetes Secret volume: one file per variable
    mounted.mkdir()
    (mounted / "SVC_MONGODB_URI").write_text(store.uri + "\n")
    (mounted / "SVC_SECRET_KEYS").write_text(",".join(settings.secret_keys))
    on_node = ray.remote(lambda deployment_id: deployment.current(deployment_id))
    with_secrets = on_node.options(runtime_env={"env_vars": {"SVC_SECRETS_DIR": str(mounted)}})
    found = await asyncio.to_thread(ray.get, with_secrets.remote(config.deployment))
    assert found.mongodb_uri == store.uri and found.vault_keys == settings.secret_keys
    assert found.version == config.version
    # A node without them: the actor cannot be built, and the error names what is missing.
    without = on_node.options(runtime_env={"env_vars": {"SVC_SECRETS_DIR": str(tmp_path)}})
    try:
        await asyncio.to_thread(ray.get, without.remote(config.deployment))
    except ray.exceptions.RayTaskError as exc:
        assert "SVC_MONGODB_URI and SVC_SECRET_KEYS" in str(exc)
    else:
        raise AssertionError("a node without secrets must refuse")


def test_the_version_changes_with_a_secret_and_tells_nothing_about_it(tmp_path, secret_key):
    settings = Settings.from_env({}, data_dir=tmp_path, secret_keys=(secret_key,))
    uri = "mongodb://svc:first@db/prod"
    base = deployment.DeploymentConfig(settings, uri, (secret_key,))
    assert deployment.DeploymentConfig(settings, uri, (secret_key,)).version == base.version
    changed = deployment.DeploymentConfig(settings, "mongodb://svc:second@db/prod", (secret_key,))
    assert changed.version != base.version
    keyed = deployment.DeploymentConfig(settings, uri, (Fernet.generate_key().decode(), secret_key))
    assert keyed.version != base.version
