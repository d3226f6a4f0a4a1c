"""The Kubernetes manifests (deploy/kubernetes/) are valid and say what docs/deploy.md promises.

No cluster runs here, so every manifest is validated offline: the Kubernetes kinds against the
API's own schemas (the `kubernetes-validate` package bundles them, strict: an unknown field is
an error), the `RayCluster` against KubeRay's published CRD schema (tests/data/, vendored with
its provenance in tests/data/README.md). Then what the deployment relies on is checked: probes
on /api/health, one image everywhere, autoscaling workers, secrets mounted the way the service
reads them (SVC_SECRETS_DIR) with every required key non-optional, so a missing one keeps the
pod from starting with an event naming it.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.33.0"
CRD = ROOT / "tests" / "data" / "kuberay-rayclusters-crd.yaml"
REQUIRED_SECRETS = {"SVC_SECRET_KEYS", "SVC_MONGODB_URI"}


def documents() -> list[tuple[str, dict[str, Any]]]:
    """(file, document) for every manifest but the kustomization."""
    found = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        found += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return found


def kind(name: str) -> dict[str, Any]:
    """The one manifest of this kind."""
    (found,) = [doc for _, doc in documents() if doc["kind"] == name]
    return found


def named(kind_name: str, name: str) -> dict[str, Any]:
    """The manifest of this kind and name."""
    (found,) = [d for _, d in documents() if d["kind"] == kind_name and d["metadata"]["name"] == name]
    return found


@cache
def raycluster_schema() -> dict[str, Any]:
    """The CRD's v1 schema (read once: it is 900 KB of YAML, parsed with libyaml when present)."""
    crd = yaml.load(CRD.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema: dict[str, Any] = served["schema"]["openAPIV3Schema"]
    return schema


@pytest.mark.parametrize(
    ("name", "doc"), documents(), ids=[f"{n}:{d['kind']}/{d['metadata']['name']}" for n, d in documents()]
)
def test_every_manifest_is_valid(name: str, doc: dict[str, Any]):
    if doc["apiVersion"].startswith("ray.io/"):
        errors = [e.message for e in jsonschema.Draft7Validator(raycluster_schema()).iter_errors(doc)]
        assert errors == [], name
    else:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_validators_catch_mistakes():
    api = kind("Deployment")
    broken = yaml.safe_load(yaml.safe_dump(api))
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)
    cluster = yaml.safe_load(yaml.safe_dump(kind("RayCluster")))
    cluster["spec"]["workerGroupSpecs"][0]["maxReplicas"] = "ten"
    cluster["spec"]["authOptions"]["mode"] = "password"
    assert len(list(jsonschema.Draft7Validator(raycluster_schema()).iter_errors(cluster))) == 2


def test_the_kustomization_lists_every_manifest():
    listed = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(
        p.name for p in MANIFESTS.glob("*.yaml") if p.name != "kustomization.yaml"
    )


def pods() -> dict[str, dict[str, Any]]:
    """The pod templates of the service's own image: the API and each Ray group."""
    cluster = kind("RayCluster")["spec"]
    found = {
        "api": kind("Deployment")["spec"]["template"]["spec"],
        "ray-head": cluster["headGroupSpec"]["template"]["spec"],
    }
    for group in cluster["workerGroupSpecs"]:
        found[f"ray-{group['groupName']}"] = group["template"]["spec"]
    return found


def test_one_image_non_root_and_resources_everywhere():
    images = set()
    for name, pod in pods().items():
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        for container in pod["containers"]:
            images.add(container["image"])
            assert container["resources"]["limits"] and container["resources"]["requests"], name
            assert container["readinessProbe"] and container["livenessProbe"], name
    assert len(images) == 1, "the API and every Ray node run the same code, Ray and Python"


def test_the_api_is_probed_on_health_and_served():
    api = kind("Deployment")
    container = api["spec"]["template"]["spec"]["containers"][0]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/api/health"
    assert api["spec"]["replicas"] >= 2
    service = named("Service", "svc-api")
    assert service["spec"]["selector"].items() <= api["spec"]["template"]["metadata"]["labels"].items()
    env = {e["name"]: e for e in container["env"]}
    head_service = f"{kind('RayCluster')['metadata']['name']}-head-svc"  # the Service KubeRay makes
    assert env["SVC_RAY_ADDRESS"]["value"] == f"ray://{head_service}:10001"
    assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": kind("RayCluster")["spec"]["authOptions"]["secretName"],
        "key": "auth_token",
    }


def test_workers_autoscale_and_actors_stay_off_the_head():
    cluster = kind("RayCluster")["spec"]
    assert cluster["enableInTreeAutoscaling"] is True
    assert cluster["authOptions"]["mode"] == "token"
    assert cluster["headGroupSpec"]["rayStartParams"]["memory"] == "0", "install actors reserve memory"
    for group in cluster["workerGroupSpecs"]:
        assert 0 < group["minReplicas"] <= group["replicas"] < group["maxReplicas"]


def test_secrets_are_mounted_as_files_and_required_ones_cannot_be_missing():
    needs = {"api": REQUIRED_SECRETS | {"SVC_METRICS_TOKEN"}}
    for name, pod in pods().items():
        container = pod["containers"][0]
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        mounted = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        volume = next(v for v in pod["volumes"] if v["name"] == "secrets")
        assert mounted["secrets"] == env["SVC_SECRETS_DIR"], name
        sources = volume["projected"]["sources"]
        required = [s["secret"] for s in sources if not s["secret"].get("optional")]
        keys = {item["key"] for source in required for item in source["items"]}
        assert keys == needs.get(name, REQUIRED_SECRETS), name
        assert all(item["key"] == item["path"] for source in required for item in source["items"])
        # Nothing secret as a plain value in a manifest.
        assert not {"SVC_SECRET_KEYS", "SVC_MONGODB_URI", "SVC_METRICS_TOKEN"} & set(env), name


def test_mongodb_is_a_replica_set_with_a_key_file():
    mongo = kind("StatefulSet")["spec"]
    container = mongo["template"]["spec"]["containers"][0]
    args = " ".join(container["args"])
    assert "--replSet rs0" in args and "--keyFile" in args
    assert mongo["volumeClaimTemplates"], "data on a persistent volume"
    initiate = " ".join(kind("Job")["spec"]["template"]["spec"]["containers"][0]["command"])
    assert "rs.initiate" in initiate and "rs0" in initiate
