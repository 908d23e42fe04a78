"""The deployment files (deploy/): the Kubernetes manifests are valid against the
Kubernetes schemas (kubernetes-validate, strict: an unknown field is an error), the config
they mount is one dragoman loads, the probes ask routes the server has, and the image runs
the server as a non-root user with DRAGOMAN_HOME a volume and no build tools. The image
itself is not built here (no container daemon on this machine); docs/operations.md says so."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from dragoman.backends.registry import settings_type
from dragoman.config.loader import parse_config

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
MANIFESTS = sorted((DEPLOY / "kubernetes").glob("*.yaml"))
KUBERNETES = "1.33.0"  # a release current clusters run; the package bundles its schemas (no download)


def resources() -> list[tuple[str, dict]]:
    return [(path.name, doc) for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc]


def test_the_manifests_hold_what_a_deployment_needs() -> None:
    kinds = {doc["kind"] for _, doc in resources()}
    assert kinds == {"ConfigMap", "Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"}


@pytest.mark.parametrize(("name", "resource"), resources(), ids=lambda value: value if isinstance(value, str) else "")
def test_each_manifest_is_valid_against_the_kubernetes_schema(name: str, resource: dict) -> None:
    kubernetes_validate.validate(resource, KUBERNETES, strict=True)


def test_the_check_refuses_a_wrong_manifest() -> None:
    (deployment,) = [doc for _, doc in resources() if doc["kind"] == "Deployment"]
    broken = yaml.safe_load(yaml.safe_dump(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["port"] = {"name": "http"}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES, strict=True)


def test_the_mounted_config_is_one_dragoman_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    (config_map,) = [doc for _, doc in resources() if doc["kind"] == "ConfigMap"]
    monkeypatch.setenv("DRAGOMAN_API_KEY", "k")
    monkeypatch.setenv("DRAGOMAN_HOME", "/var/lib/dragoman")
    config = parse_config(config_map["data"]["dragoman.yaml"], "configmap.yaml", settings_type)
    assert config.server.host == "0.0.0.0" and config.server.port == 11434
    assert [route.config.name for route in config.models] == ["smollm2:135m"]


def test_the_probes_ask_the_health_routes_on_the_served_port() -> None:
    (deployment,) = [doc for _, doc in resources() if doc["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    probes = {kind: container[kind]["httpGet"]["path"] for kind in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert probes == {"startupProbe": "/health/live", "livenessProbe": "/health/live", "readinessProbe": "/health/ready"}
    assert container["ports"][0]["containerPort"] == 11434
    assert "/etc/dragoman/dragoman.yaml" in container["args"]


def test_the_image_runs_as_a_user_with_its_home_a_volume_and_no_build_tools() -> None:
    lines = [line.strip() for line in (DEPLOY / "Dockerfile").read_text().splitlines() if line.strip() and not line.startswith("#")]
    runtime = lines[max(i for i, line in enumerate(lines) if line.startswith("FROM")):]
    assert any(line.startswith("USER ") and line.split()[1] not in ("root", "0") for line in runtime)
    assert 'VOLUME ["/var/lib/dragoman"]' in runtime and any("DRAGOMAN_HOME=/var/lib/dragoman" in line for line in runtime)
    installs = [line for line in runtime if "pip install" in line]
    assert installs and all("'.[cpu]'" in line and "prepare" not in line for line in installs)
    assert runtime[-1].startswith("ENTRYPOINT") and "serve" in runtime[-1]
